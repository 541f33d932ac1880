"""Inference over dependency trees: exact first-order kernels (Matrix-Tree, Eisner) and oracles."""
