"""Exact algorithms over dependency trees, on arc score matrices ``scores[h, m]``.

Matrix-Tree theorem (``matrix_tree``, with the log-space elimination of ``tree_elimination``), Eisner's
algorithm with its semiring and chart (``eisner``), their dispatch by ``TreeConstraint`` (``exact``),
Hessian-vector products of the log partition (``tree_hessian``), maximum spanning arborescences (``mst``),
MBR and best trees (``mbr``), k-best trees (``kbest_projective``, ``kbest_nonprojective``), exact sampling
(``sample``), brute-force enumeration for tests (``brute_force``), and the logistic function that BP turns
log-odds into beliefs with (``logistic``, compiled: SciPy's costs a parse the import of ``scipy.special``).

Layering: below ``engine.graph`` (whose TREE factor runs these kernels) and ``engine.inference``; these
modules import only each other, numpy, scipy and numba.
"""
