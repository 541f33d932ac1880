"""Constituency parsing with factored latent-annotation PCFGs and expectation propagation (Hall & Klein 2012).

The second formalism of the engine (issue 26). Layout, bottom to top:

- ``grammar``: the X-bar backbone as index arrays (labels, binary rules, unary rules with identities), the one
  representation every other module shares; gold trees as anchored items.
- ``treebank``, ``binarize``, ``evalb``: reading ``.mrg`` files, cleaning, head-outward binarisation and its
  inverse, EVALB scoring (COLLINS.prm).
- ``anchored``, ``factor``, ``inside_outside``, ``reference``, ``projection``, ``ep``: the anchored items of a
  sentence and anchored grammars over them, factors (and their exact Kronecker product), inside-outside over
  anchored items (scaled; compiled in ``kernel``, vectorised numpy beside it; ``reference`` is the log-space
  oracle), projection onto anchored PCFGs, EP and ADF.
- ``xbar``, ``dense``, ``pruning``, ``decode``, ``viterbi``, ``item_viterbi``, ``oracle``, ``decode_product``,
  ``baseline``: the generative X-bar PCFG, its dense one-substate inside-outside over the unpruned chart, coarse
  pruning by its posteriors, Max-Recall and Viterbi decoding, max-plus Viterbi over anchored items with any item
  scores (the pruned forest's oracle tree, Petrov's product decoding of several factors), the baseline parser
  end to end;
- ``features``, ``latent``, ``objective``, ``latent_train``, ``latent_parser``: the discriminative factored latent
  model (lexical features, per-factor weights and the factors they make, the gradient map), its training
  objective under exact / EP / ADF / independent inference, the trainer, and its parser (EP, Max-Recall);
  ``outputs``, ``spelling``, ``bootstrap``: answers with posteriors, Penn Treebank spelling, paired bootstrap of
  EVALB F1; ``commands``: the constituency side of ``python -m engine``.
"""
