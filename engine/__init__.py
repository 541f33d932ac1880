"""Probabilistic dependency parsing engine.

Data flow, one sub-package per stage:

    data (CoNLL-U) -> features -> scoring (arc potentials) -> inference (exact kernels, later BP)
    -> decode (MST / Eisner / MBR) -> CoNLL-U or JSON

``training`` and ``evaluation`` are consumers of ``inference`` and ``decode``.

Conventions used everywhere: a sentence of ``n`` words has positions ``0..n`` where ``0`` is ROOT;
an arc score matrix ``scores`` has shape ``(n + 1, n + 1)`` with ``scores[h, m]`` the log-potential of
the arc head ``h`` -> dependent ``m``; column 0 and the diagonal are ignored. ``heads`` is an integer
array of shape ``(n + 1,)`` with ``heads[0] == -1``.
"""

__version__ = "0.1.0"
