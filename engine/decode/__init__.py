"""Labels of the arcs of a decoded tree (count and log-linear labellers) and parsing averaged over tag samples.
The tree decoders (MST, Eisner Viterbi, MBR, k-best, samples) are in ``engine.kernels``."""
