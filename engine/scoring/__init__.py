"""Arc potentials: weights dotted with hashed features."""
