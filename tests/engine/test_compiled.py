"""``engine.compiled.warm_up`` compiles (or loads) the kernels a parse uses, for every weight type, so that the
service's first request does not pay for compilation."""

from __future__ import annotations

from engine.compiled import warm_up
from engine.features import labeler_kernel, second_order
from engine.scoring import fused, triple_deltas
from engine.text import crf_ragged, linear


def test_warm_up_compiles_every_parsing_kernel_for_every_weight_type() -> None:
    warm_up()
    per_weight_type = {fused._scores_kernel: 3, triple_deltas._deltas_kernel: 3, linear._row_sums: 3,
                       labeler_kernel.add_row_scores: 4}  # float16 bits, float32, float64, float32 into float64
    for kernel, types in per_weight_type.items():
        assert len(kernel.signatures) >= types, kernel
    for kernel in (second_order._triple_kernel, labeler_kernel.group_ids, labeler_kernel.unique_rows,
                   crf_ragged._forward, crf_ragged._marginals, crf_ragged._viterbi, crf_ragged._sample):
        assert kernel.signatures, kernel
