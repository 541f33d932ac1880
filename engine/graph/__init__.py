"""Factor graphs over boolean link variables ``L[h, m]`` (Smith & Eisner 2008 §3).

Each factor *family* (all GRAND factors of a sentence, all EXACTLY1 factors, the one TREE factor, ...)
is one small object whose ``propagate`` is a pure, vectorised function from the messages its factors
receive to the messages they send, all as log-odds ``log m(true) - log m(false)``.
"""
