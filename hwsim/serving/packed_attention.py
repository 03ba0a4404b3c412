"""paged|sdpa attention as transformers 5.17 continuous batching runs it: one dense SDPA over the
whole packed batch, not one attention per sequence.

The library packs every sequence of a step into one row of `q` query tokens and reads `k` keys
(input_outputs.ContinuousBatchingIOs.get_model_kwargs: the mask is `[..., :q_size, :kv_size]`,
kv_size = max_kv_read + num_q_tokens), and sdpa_paged.sdpa_attention_paged_forward hands SDPA
the whole q x k block with a block-diagonal bias (utils.build_attention_mask), `is_causal=False`:
every query meets every key of the step, its own sequence's or not. Per decoder layer:
- keys gathered from the paged cache (cache.PagedAttentionCache.update: `index_select` of K and
  V over the read index, kv_size rows) unless the step reads no cache (first-chunk prefills only);
- K and V repeated to the query heads and made contiguous (sdpa_paged.repeat_kv);
- SDPA over q x k with the q x k bias: 4 q k head_dim flops per head.
With CUDA graphs (or compile) the library pads first (model_runner.ModelRunner.maybe_pad_inputs:
q to `q_padding_interval_size`, the KV read to `kv_padding_interval_size`, an empty read to one
interval), and the padded sizes run.

Its time per layer is the roofline of the flops at `efficiency` of the chip's bf16 tensor peak
and the bytes at its HBM read rate. hwsim's own pass times attention per sequence (flash-like);
the engine host replaces that part of the step by this one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DTYPE_BYTES = 2          # bf16 activations, cache and mask (the served model's dtype)


def pad_to_interval(size: int, interval: int, cap: int) -> int:
    """transformers 5.17 continuous_batching/utils.pad_to_interval: an empty size pads to one interval."""
    if interval <= 0:
        return cap
    return min(math.ceil(size / interval) * interval if size > 0 else interval, cap)


@dataclass(frozen=True, slots=True)
class PackedShape:
    q: int              # query rows SDPA runs
    k: int              # key columns (cached reads + the step's own tokens)
    gathers: bool       # keys read back from the paged cache (index_select)


@dataclass(frozen=True, slots=True)
class PackedAttention:
    """The model's attention dims and the chip's rates; `efficiency` the masked SDPA's share of the
    tensor peak (the engine host profile's, per SDPA backend)."""
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tensor_flops: float
    hbm_bytes_s: float

    @classmethod
    def of(cls, model, chip) -> "PackedAttention":
        a = model.attention
        return cls(model.layers, a.heads, a.kv_heads or a.heads, a.head_dim,
                   chip.tensor_flops["bf16"], chip.hbm_read_bytes_s)

    @staticmethod
    def shape(batch, padding: tuple | None = None) -> PackedShape:
        """The SDPA's q x k for `batch` [(query, cached)]; `padding` (q interval, kv interval,
        max batch tokens, pages) when the engine pads (CUDA graphs)."""
        q = sum(n for n, _ in batch)
        cached = sum(c for _, c in batch)
        if padding is None:
            return PackedShape(q, q + cached, cached > 0)
        q_int, kv_int, max_tokens, pages = padding
        q_pad = pad_to_interval(q, q_int, max_tokens)
        return PackedShape(q_pad, q_pad + pad_to_interval(cached, kv_int, pages), True)

    def layer_bytes(self, s: PackedShape) -> float:
        kv = s.k * self.kv_heads * self.head_dim * DTYPE_BYTES * 2           # K and V, cache heads
        rep = s.k * self.heads * self.head_dim * DTYPE_BYTES * 2             # K and V, query heads
        gather = 2 * kv if s.gathers else 0.0                                # index_select: read, write
        repeat = kv + rep if self.heads != self.kv_heads else 0.0            # repeat_kv: read, write
        q_out = 2 * s.q * self.heads * self.head_dim * DTYPE_BYTES           # Q in, output out
        return gather + repeat + rep + q_out + s.q * s.k * DTYPE_BYTES       # + SDPA's K, V and the bias

    def seconds(self, s: PackedShape, efficiency: float) -> float:
        """The step's attention over all layers."""
        flops = 4.0 * s.q * s.k * self.head_dim * self.heads
        per_layer = max(flops / (self.tensor_flops * efficiency), self.layer_bytes(s) / self.hbm_bytes_s)
        return per_layer * self.layers
