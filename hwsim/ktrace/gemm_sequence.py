"""Shapes for the GEMMs of a trace that recorded none (CUDA-graph replays, torch.compile),
from where each stands in its layer.

A cuBLAS kernel's grid often cannot say its weight: nvjet and CUTLASS persistent kernels launch
one block per SM whatever N is (an H100 trace runs Llama-3.1-8B's gate, up and LM head all on
grid [2, 66, 1]). But a decoder runs the same GEMMs in the same order in every layer, so the
step's GEMM kernels repeat with a period of the layer's GEMM count: q, k, v, o, gate, up, down
(7) in Hugging Face's modules, qkv, o, gate_up, down (4) where an engine fuses them. Where the
kernels' (name, grid) signatures repeat with the period of one such order over the model's
layers, the i-th GEMM of each period is the order's i-th weight, and a GEMM after the last layer
is the LM head. Anything else is left to the grid matching of `classify._gemm_from_grid`.
"""

from __future__ import annotations

import re

from hwsim.model.shapes import ModelShape

EXTRA = 2      # GEMMs outside the layers a step may run: the LM head, and one more
# fp32 SIMT GEMMs are no weight's (the weights are bf16 or narrower): HF's RoPE computes its
# angles with one (inv_freq x positions) inside the first layer; it keeps its grid matching
FP32_SIMT = re.compile(r"sgemm")


def layer_orders(model: ModelShape) -> list[list[tuple[int, int]]]:
    """Candidate (K, N) sequences of one layer's weight GEMMs, in stream order: the attention's
    projections fused or not, the output projection, then the FFN's gate and up fused or not
    and its down (an MoE layer: its router; its experts run as grouped GEMMs)."""
    h, a = model.hidden, model.attention
    fused_attn = [(k, n) for _, k, n, _ in a.projections(h)]
    attns = [fused_attn]
    if getattr(a, "kind", "gqa") == "gqa":
        kv = a.kv_heads * a.head_dim
        attns.append([(h, a.heads * a.head_dim), (h, kv), (h, kv)])
    o = [(a.o_proj_in, h)]
    if model.moe:
        s = model.moe.shared_width
        ffns = [[(h, model.moe.experts)] + ([(h, 2 * s), (s, h)] if s else []),
                [(h, model.moe.experts)] + ([(h, s), (h, s), (s, h)] if s else [])]
    else:
        f = model.ffn
        ffns = [[(h, 2 * f), (f, h)], [(h, f), (h, f), (f, h)]]
    return [attn + o + ffn for attn in attns for ffn in ffns]


def assign(signatures: list[tuple], model: ModelShape) -> dict[int, tuple[int, int]]:
    """{index into `signatures`: (K, N)} for the GEMMs whose place in a periodic stretch of
    `model.layers` periods says their weight; {} where no order fits."""
    n, layers = len(signatures), model.layers
    for order in sorted(layer_orders(model), key=len, reverse=True):
        p = len(order)
        if not 0 <= n - p * layers <= EXTRA:
            continue
        for start in range(n - p * layers + 1):
            end = start + p * layers
            if all(signatures[i] == signatures[i + p] for i in range(start, end - p)):
                shapes = {i: order[(i - start) % p] for i in range(start, end)}
                if end < n:                       # after the last layer: the LM head
                    shapes[end] = (model.hidden, model.vocab)
                return shapes
    return {}
