"""First-order arc features: declared templates hashed into a fixed-size weight vector."""
