"""Probabilistic dependency parsing engine.

Data flow, one sub-package (or module) per stage, each importing only the stages below it
(``tests/test_import_layers.py`` keeps the order, bottom to top):

    optim, data, model, hashing -> text -> features -> scoring -> kernels (exact tree algorithms)
    -> graph (factor families) -> inference (BP, relaxed BP) -> results (ParsedSentence,
    TreeDistribution) -> decode (labellers) -> parser, bp_parser, pipeline -> evaluation -> training
    -> cli

Conventions used everywhere: a sentence of ``n`` words has positions ``0..n`` where ``0`` is ROOT;
an arc score matrix ``scores`` has shape ``(n + 1, n + 1)`` with ``scores[h, m]`` the log-potential of
the arc head ``h`` -> dependent ``m``; column 0 and the diagonal are ignored. ``heads`` is an integer
array of shape ``(n + 1,)`` with ``heads[0] == -1``.
"""

__version__ = "0.1.0"
