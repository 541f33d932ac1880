"""Parsing with the factored latent model: X-bar pruning, EP over the factors, Max-Recall from the final ``q``
(Hall & Klein 2012, §5.5; ``../shared/design/epic.md`` §2 "Decoding with Max-Recall").

A sentence's mask is the X-bar PCFG's posteriors thresholded at ``exp(PRUNING_THRESHOLD)`` (``pruning``, no gold
spans); its items carry the model's ``M`` factors. The coarse marginals decoded come from

- ``ep`` (default) / ``adf``: the final anchored grammar ``q`` of EP (ADF: one sweep), by a one-substate
  inside-outside of ``q`` over the items (``factor.unit_like``);
- ``exact``: the product of the factors (``latent.product_factor``, ``K^M`` substates): also what a one-factor
  model always uses (EP of one factor is exact after its first sweep, ``ep``).

Max-Recall (``decode.max_recall``) turns ``mu_bot``, ``mu_top`` into the tree. A sentence the model cannot
parse (no live tree under the mask, or an EP pass without a finite partition in its first sweep) falls back to
the X-bar parser's tree and marginals, counted in ``failures``. EP's sweeps and convergence per sentence are
kept (``sweeps``, ``converged``) for ``evaluate``'s ``ep_sweeps_mean`` and ``ep_converged_fraction``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import AnchoredScores, SpanMask, build_items
from engine.constituency.baseline import XbarParser
from engine.constituency.decode import max_recall
from engine.constituency.dense import DenseMarginals
from engine.constituency.ep import EPSettings, assumed_density_filtering, expectation_propagation
from engine.constituency.factor import unit_like
from engine.constituency.inside_outside import inside_outside
from engine.constituency.latent import LatentModel, product_factor
from engine.constituency.pruning import PRUNING_THRESHOLD, prune_mask
from engine.constituency.xbar import chain_choice

__all__ = ["DECODING", "LatentParser"]

DECODING = ("ep", "adf", "exact")


@dataclass
class LatentParser:
    """Parses with a :class:`~engine.constituency.latent.LatentModel` (module docstring)."""

    model: LatentModel
    inference: str = "ep"
    ep: EPSettings = field(default_factory=EPSettings)
    threshold: float = PRUNING_THRESHOLD
    failures: int = field(init=False, default=0)
    sweeps: list[int] = field(init=False, default_factory=list)
    converged: list[bool] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.inference not in DECODING:
            raise ValueError(f"decoding inference must be one of {DECODING}, got {self.inference!r}")
        self.pruner = XbarParser(self.model.xbar, self.threshold)
        self.chains = chain_choice(self.model.grammar, self.model.xbar.log_unary)

    def parse(self, words: Sequence[str]) -> Tree:
        return self.parse_with_marginals(words)[0]

    def parse_with_marginals(self, words: Sequence[str]) -> tuple[Tree, DenseMarginals | None]:
        """The Max-Recall tree of ``words`` and the coarse marginals ``(n+1, n+1, L)`` it was decoded from."""
        try:
            dense = self.pruner.marginals(words)
        except FloatingPointError:
            self.failures += 1
            return self.pruner.parse_with_marginals(words)
        return self.decode(words, prune_mask(self.model.grammar, dense, self.threshold), dense)

    def marginals(self, words: Sequence[str], mask: SpanMask) -> DenseMarginals:
        """The coarse marginals of the factored model over ``mask``'s items; ``FloatingPointError`` when it has
        no tree there."""
        items = build_items(self.model.grammar, mask)
        factors = self.model.factors(self.model.sentence(words))
        if self.inference == "exact" or len(factors) == 1:
            joint = inside_outside(items, product_factor(factors), AnchoredScores.zeros(items))
            return DenseMarginals(joint.log_z, joint.mu_bot, joint.mu_top)
        run = assumed_density_filtering if self.inference == "adf" else expectation_propagation
        result = run(items, factors, self.ep)
        self.sweeps.append(result.sweeps)
        self.converged.append(result.converged)
        coarse = inside_outside(items, unit_like(factors[0]), result.q)
        return DenseMarginals(result.log_z, coarse.mu_bot, coarse.mu_top)

    def decode(self, words: Sequence[str], mask: SpanMask,
               dense: DenseMarginals | None = None) -> tuple[Tree, DenseMarginals | None]:
        """Parse ``words`` over a given mask (the trainer's cached dev masks); X-bar fallback as documented."""
        try:
            marginals = self.marginals(words, mask)
        except FloatingPointError:
            self.failures += 1
            dense = dense or self.pruner.marginals(words)
            return max_recall(self.model.grammar, dense.mu_bot, dense.mu_top, words, self.pruner.chains), dense
        return max_recall(self.model.grammar, marginals.mu_bot, marginals.mu_top, words, self.chains), marginals
