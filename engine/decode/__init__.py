"""Decoders: maximum spanning arborescence, Eisner Viterbi, MBR."""
