"""The settings a client may give a training job (the ``config`` form field of ``POST /jobs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from engine.training.pipeline import TrainOptions

Factor = Literal["grand", "sib", "childseq", "nocross"]
Component = Literal["tokenizer", "tagger", "parser", "labeler"]


class JobConfig(BaseModel):
    """How to train a model; every field has a default, unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field("custom", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                      description="Model name; the trained model is published as version N of this name.")
    order: Literal[1, 2] = Field(1, description="1: first-order model trained by conditional log-likelihood with "
                                 "exact inference; 2: higher-order factors trained under belief propagation "
                                 "(a first-order pruner is trained first).")
    tree: Literal["nonprojective", "projective"] = Field(
        "nonprojective", description="Tree space: non-projective (Matrix-Tree) or projective (Eisner); projective "
        "models skip non-projective training trees.")
    root: Literal["single", "multi"] = Field("single", description="Exactly one word attached to ROOT, or any number.")
    epochs: int = Field(8, ge=1, le=50, description="Training epochs; the epoch with the best dev UAS is kept.")
    batch_size: int = Field(32, ge=1, le=512, description="Sentences per mini-batch.")
    learning_rate: float | None = Field(None, gt=0, description="AdaGrad step size (default 0.2 for order 1, "
                                        "0.05 for order 2).")
    l2: float = Field(10.0, ge=0, description="L2 regularisation strength.")
    dim: int = Field(1 << 22, ge=1 << 10, le=1 << 24, description="Hashed feature buckets for first-order "
                     "features (memory grows linearly: several float64 arrays of this size).")
    second_dim: int = Field(1 << 21, ge=1 << 10, le=1 << 24, description="Hashed feature buckets for the "
                            "higher-order features (order 2).")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Random seed of the batch order.")
    seeds: int = Field(1, ge=1, le=10, description="Train the parser this many times (seeds seed, seed + 1, ...) "
                       "and keep the mean of their weights; multiplies the parser's training time.")
    average: bool = Field(True, description="Average each epoch's iterates (otherwise keep the last one).")
    max_sentences: int | None = Field(None, ge=1, description="Train on the first N sentences only.")
    factors: list[Factor] = Field(default_factory=lambda: ["grand", "sib"], max_length=4,
                                  description="Higher-order factor families (order 2): grand (grandparent), "
                                  "sib (siblings), childseq (child sequence), nocross (no crossing arcs).")
    bp_iterations: int = Field(3, ge=1, le=20, description="Belief-propagation iterations per sentence during "
                               "training (order 2).")
    components: list[Component] = Field(default_factory=lambda: ["tokenizer", "tagger", "parser", "labeler"],
                                        min_length=1, max_length=4, description="What to train: the parser always; "
                                        "tokenizer (raw text), tagger (UPOS/XPOS; the parser then trains on "
                                        "jackknifed tags), labeler (log-linear DEPREL).")
    tag_samples: int = Field(0, ge=0, le=16, description="The model's default inference.tag_samples: marginals "
                             "of words it tags averaged over this many tag sequences from its tagger as well "
                             "as the best one (needs the tagger component).")

    labeler_tag_samples: int | None = Field(None, ge=0, le=16, description="The labeler also trains on this many "
                                            "copies of each training sentence under tag sequences drawn from its "
                                            "jackknife fold tagger (default: 1 with the tagger and labeler "
                                            "components, else 0).")

    @field_validator("factors")
    @classmethod
    def _unique(cls, factors: list[Factor]) -> list[Factor]:
        return list(dict.fromkeys(factors))

    @field_validator("components")
    @classmethod
    def _with_parser(cls, components: list[Component]) -> list[Component]:
        if "parser" not in components:
            raise ValueError("components must include parser")
        return list(dict.fromkeys(components))

    @model_validator(mode="after")
    def _consistent(self) -> JobConfig:
        """Options that cannot work together (e.g. tag_samples without the tagger), as the engine checks them."""
        from engine.training.pipeline import TrainOptionsError

        try:
            self.to_options()
        except TrainOptionsError as e:
            raise ValueError(str(e)) from None
        return self

    def to_options(self) -> TrainOptions:
        """The engine's training options for this config."""
        from engine.training.pipeline import TrainOptions

        return TrainOptions(order=self.order, tree=self.tree, root=self.root, epochs=self.epochs,
                            batch_size=self.batch_size, learning_rate=self.learning_rate, l2=self.l2, dim=self.dim,
                            seed=self.seed, average=self.average, max_sentences=self.max_sentences,
                            factors=tuple(self.factors), bp_iterations=self.bp_iterations,
                            second_dim=self.second_dim, name=self.name,
                            components=tuple(dict.fromkeys(self.components)), tag_samples=self.tag_samples,
                            seeds=self.seeds, labeler_tag_samples=self.labeler_tag_samples)
