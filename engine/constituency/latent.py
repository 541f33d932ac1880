"""The discriminative factored latent model: weights, the factors they make per sentence, and the map from
expected counts back to the weights' gradient (Hall & Klein 2012, §3.2 eq. 1, §6; ``../shared/design/epic.md``
§1.4, §2 "Minimal model").

Each of ``M`` factors is a latent-annotation refinement of the X-bar backbone (every label split into ``K``
substates, TOP unsplit, identity unaries diagonal: ``factor.make_factor``) with weights of its own, stored one
after the other in one flat vector ``theta`` (:class:`Layout`). For factor ``m``:

- ``log_w[r, x, y, z] = W_m[r, x, y, z] + C_m[r]``: a refined binary rule's weight plus its coarse rule's (a
  back-off feature shared by the ``K^3`` refinements);
- ``log_u[u, x, y] = U_m[u, x, y] + D_m[u]``: the same for unary rules;
- ``log_e[i, t, x] = sum_f X[i, f] E_m[f, t, x]`` for the tags ``t`` the tag dictionary allows word ``i``
  (``-inf`` otherwise): lexical features (``features``) crossed with tag and substate.

All three are linear in ``theta``, so the gradient of ``log Z`` (any of exact, EP, ADF: expected counts of the
refined events, ``FactorMarginals``) with respect to ``theta_m`` is the counts mapped back by the transposes:
``dW = w_counts``, ``dC = sum_xyz w_counts``, ``dE = X^T e_counts`` (:meth:`LatentModel.block_gradient`).

**Initialisation** (brief §2): ``C = log p(A -> B C | A) / M`` and ``D = log p(u | A) / M`` of the X-bar PCFG when
``warm_start`` (so the product of the factors starts as the X-bar rule model), every weight plus zero-mean
normal noise of standard deviation ``noise``, with seed ``seed + m`` for factor ``m`` (identical factors stay
identical under EP). :func:`product_factor` / :func:`split_product` are the exact product of ``M`` factors (a
``K^M``-state factor by repeated ``factor.kronecker_product``) and its counts split back per factor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy import sparse

from engine.constituency.factor import Factor, FactorMarginals, FloatArray, kronecker_product, make_factor, substates
from engine.constituency.features import LexicalFeatures
from engine.constituency.grammar import Grammar
from engine.constituency.xbar import XbarPCFG

__all__ = ["Counts", "LatentModel", "LatentSettings", "Layout", "SentenceFeatures", "product_factor",
           "split_product"]


@dataclass(frozen=True)
class LatentSettings:
    """The model's shape and initialisation, declared once here (module docstring): ``factors`` M (>= 1),
    ``substates`` K per split label (>= 2), ``noise`` (>= 0), ``seed``, ``warm_start``, ``word_threshold``
    (>= 1: training count from which a word is its own feature, else its signature)."""

    factors: int = 2
    substates: int = 2
    noise: float = 0.01
    seed: int = 0
    warm_start: bool = True
    word_threshold: int = 5

    def __post_init__(self) -> None:
        if self.factors < 1 or self.substates < 2:
            raise ValueError(f"factors must be >= 1 and substates >= 2, got {self.factors}, {self.substates}")
        if not self.noise >= 0 or self.word_threshold < 1:
            raise ValueError("noise must be >= 0 and word_threshold >= 1")


@dataclass(frozen=True)
class Layout:
    """Where each factor's weights sit in ``theta``: ``R`` binary rules, ``U`` unary rules, ``F`` features,
    ``T`` tags, ``K`` substates; block ``m`` is ``theta[m * size:(m + 1) * size]``, inside it ``W, C, U, D, E``."""

    r: int
    u: int
    f: int
    t: int
    k: int

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        k = self.k
        return (self.r, k, k, k), (self.r,), (self.u, k, k), (self.u,), (self.f, self.t, k)

    @property
    def size(self) -> int:
        return sum(int(np.prod(s)) for s in self.shapes)

    def split(self, block: FloatArray) -> list[FloatArray]:
        """The five views ``W, C, U, D, E`` of one factor's block."""
        out, at = [], 0
        for shape in self.shapes:
            size = int(np.prod(shape))
            out.append(block[at:at + size].reshape(shape))
            at += size
        return out


@dataclass(frozen=True)
class SentenceFeatures:
    """What a sentence's factors need besides ``theta``: the ``(n, F)`` feature matrix and the ``(n, L)`` tags
    the tag dictionary allows."""

    x: sparse.csr_array
    allowed: np.ndarray


@dataclass(frozen=True)
class Counts:
    """Refined expected counts of one factor (or their difference): ``w (R, K, K, K)``, ``u (U, K, K)``,
    ``e (n, L, K)``."""

    w: FloatArray
    u: FloatArray
    e: FloatArray

    @staticmethod
    def of(m: FactorMarginals) -> Counts:
        return Counts(m.w_counts, m.u_counts, m.e_counts)

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.w - other.w, self.u - other.u, self.e - other.e)


@dataclass(frozen=True)
class LatentModel:
    """The X-bar PCFG (grammar, tag dictionary, pruning), the lexical features, the settings and ``theta``."""

    xbar: XbarPCFG
    features: LexicalFeatures
    settings: LatentSettings
    theta: FloatArray

    @property
    def grammar(self) -> Grammar:
        return self.xbar.grammar

    @property
    def layout(self) -> Layout:
        g = self.grammar
        return Layout(len(g.binary), len(g.unary), self.features.size, int(g.is_tag.sum()), self.settings.substates)

    @classmethod
    def initial(cls, xbar: XbarPCFG, features: LexicalFeatures, settings: LatentSettings) -> LatentModel:
        """Starting weights (module docstring: warm start, noise with one seed per factor)."""
        model = cls(xbar, features, settings, np.zeros(0))
        layout, blocks = model.layout, []
        for m in range(settings.factors):
            block = np.random.default_rng(settings.seed + m).normal(0.0, settings.noise, layout.size)
            if settings.warm_start:
                _, c, _, d, _ = layout.split(block)
                c += np.where(np.isfinite(xbar.log_binary), xbar.log_binary, 0.0) / settings.factors
                d += np.where(np.isfinite(xbar.log_unary), xbar.log_unary, 0.0) / settings.factors
            blocks.append(block)
        return replace(model, theta=np.concatenate(blocks))

    def grown(self, settings: LatentSettings) -> LatentModel:
        """A model of ``settings.factors`` factors whose first ones are this model's and the others new (noise
        alone, no warm start: the product starts as this model): the brief's warm start of ``M`` factors from the
        ``M - 1``-factor weights."""
        if settings.factors < self.settings.factors or settings.substates != self.settings.substates:
            raise ValueError(f"cannot grow {self.settings.factors} factors of {self.settings.substates} substates "
                             f"into {settings.factors} of {settings.substates}")
        settings = replace(settings, word_threshold=self.settings.word_threshold, warm_start=False)
        theta = LatentModel.initial(self.xbar, self.features, settings).theta
        theta[:len(self.theta)] = self.theta
        return LatentModel(self.xbar, self.features, settings, theta)

    def with_theta(self, theta: FloatArray) -> LatentModel:
        return replace(self, theta=theta)

    def sentence(self, words: Sequence[str]) -> SentenceFeatures:
        allowed = np.zeros((len(words), self.grammar.n_labels), dtype=bool)
        for i, word in enumerate(words):
            allowed[i, self.xbar.tags.allowed(word)] = True
        return SentenceFeatures(self.features.matrix(words), allowed)

    def factor(self, m: int, sent: SentenceFeatures) -> Factor:
        """Factor ``m``'s log weights on one sentence (module docstring), vectorised."""
        layout, g = self.layout, self.grammar
        w, c, u, d, e = layout.split(self.theta[m * layout.size:(m + 1) * layout.size])
        n, k = sent.x.shape[0], layout.k
        tags = np.flatnonzero(g.is_tag)
        lex = np.asarray(sent.x @ e.reshape(layout.f, -1)).reshape(n, layout.t, k)
        log_e = np.full((n, g.n_labels, k), -np.inf)
        log_e[:, tags] = np.where(sent.allowed[:, tags, None], lex, -np.inf)
        return make_factor(g, w + c[:, None, None, None], u + d[:, None, None], log_e, substates(g, k))

    def factors(self, sent: SentenceFeatures) -> list[Factor]:
        return [self.factor(m, sent) for m in range(self.settings.factors)]

    def block_gradient(self, counts: Counts, sent: SentenceFeatures) -> FloatArray:
        """The gradient of a factor's block from its (difference of) expected counts (module docstring)."""
        tags = np.flatnonzero(self.grammar.is_tag)
        e = np.asarray(sent.x.T @ counts.e[:, tags].reshape(len(counts.e), -1))
        return np.concatenate([counts.w.ravel(), counts.w.sum(axis=(1, 2, 3)), counts.u.ravel(),
                               counts.u.sum(axis=(1, 2)), e.ravel()])

    def manifest(self) -> dict[str, Any]:
        """The JSON part: the X-bar model's, the settings, the feature names."""
        return {**self.xbar.manifest(), "latent": asdict(self.settings), "features": list(self.features.names)}

    def arrays(self) -> dict[str, np.ndarray]:
        return {"theta": self.theta, **{f"xbar_{name}": a for name, a in self.xbar.arrays().items()}}

    @classmethod
    def load(cls, manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> LatentModel:
        xbar = XbarPCFG.load(manifest, {name[5:]: a for name, a in arrays.items() if name.startswith("xbar_")})
        settings = LatentSettings(**manifest["latent"])
        features = LexicalFeatures(tuple(str(f) for f in manifest["features"]), xbar.tags, settings.word_threshold)
        model = cls(xbar, features, settings, np.asarray(arrays["theta"], dtype=np.float64))
        if len(model.theta) != settings.factors * model.layout.size:
            raise ValueError(f"theta has {len(model.theta)} weights, the manifest's layout "
                             f"{settings.factors * model.layout.size}")
        return model


def product_factor(factors: Sequence[Factor]) -> Factor:
    """The exact product of ``factors`` (brief §1.4): substate ``(x_1, ..., x_M)`` in row-major order."""
    out = factors[0]
    for f in factors[1:]:
        out = kronecker_product(out, f)
    return out


def split_product(counts: FactorMarginals, k: int, m: int) -> list[Counts]:
    """Counts of :func:`product_factor` of ``m`` ``k``-state factors, summed onto each factor (its exact
    expected counts: the other factors' substates summed out)."""
    w = counts.w_counts.reshape(len(counts.w_counts), *([k] * (3 * m)))
    u = counts.u_counts.reshape(len(counts.u_counts), *([k] * (2 * m)))
    e = counts.e_counts.reshape(*counts.e_counts.shape[:2], *([k] * m))
    out = []
    for f in range(m):
        w_axes = tuple(1 + a for a in range(3 * m) if a % m != f)
        u_axes = tuple(1 + a for a in range(2 * m) if a % m != f)
        e_axes = tuple(2 + a for a in range(m) if a != f)
        out.append(Counts(w.sum(axis=w_axes), u.sum(axis=u_axes), e.sum(axis=e_axes)))
    return out
