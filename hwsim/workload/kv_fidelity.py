"""What a KV format costs in accuracy: attention-output error on synthetic heavy-tailed K/V.

Real keys have a few outlier channels and attention sinks with large norms; values are
roughly Gaussian per token (literature.md 2.3, KIVI Fig. 1). We draw such K and V with a
seeded generator, quantize them class by class as the format says (sinks, outliers, recent
window, routine tokens; per-channel groups for K, per-token groups for V), and compare the
attention output for random queries with the exact one. The number is a relative L2 error
of the attention output (0 = exact). It ranks formats; it is not a perplexity.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from hwsim.workload.kv_format import KvFormat

CONTEXT = 1024
HEAD_DIM = 128
QUERIES = 16
OUTLIER_CHANNELS = 4          # key channels with 10x the scale of the rest
OUTLIER_CHANNEL_SCALE = 10.0
SINK_TOKENS = 4
SINK_SCALE = 6.0
HEAVY_TOKEN_FRACTION = 0.02   # tokens with 4x magnitude (the outliers a scheme may protect)
HEAVY_TOKEN_SCALE = 4.0


def _synthetic(seed: int):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((CONTEXT, HEAD_DIM))
    k[:, :OUTLIER_CHANNELS] *= OUTLIER_CHANNEL_SCALE
    v = rng.standard_normal((CONTEXT, HEAD_DIM))
    k[:SINK_TOKENS] *= SINK_SCALE
    heavy = rng.random(CONTEXT) < HEAVY_TOKEN_FRACTION
    heavy[:SINK_TOKENS] = False
    k[heavy] *= HEAVY_TOKEN_SCALE
    v[heavy] *= HEAVY_TOKEN_SCALE
    q = rng.standard_normal((QUERIES, HEAD_DIM))
    q[:, :OUTLIER_CHANNELS] *= 2.0
    return q, k, v, heavy


def _quantize(x: np.ndarray, bits: float, group: int, axis: int) -> np.ndarray:
    """Asymmetric round-to-nearest with one scale and zero per group along `axis`."""
    if bits >= 16 or x.size == 0:
        return x
    levels = max(2.0, round(2 ** bits)) - 1      # 1.5 bits -> 3 levels (ternary-like)
    moved = np.moveaxis(x, axis, -1)
    shape = moved.shape
    n = shape[-1]
    pad = (-n) % group
    flat = np.concatenate([moved, np.repeat(moved[..., -1:], pad, axis=-1)], axis=-1) if pad else moved
    g = flat.reshape(*shape[:-1], -1, group)
    lo, hi = g.min(-1, keepdims=True), g.max(-1, keepdims=True)
    scale = np.where(hi > lo, (hi - lo) / levels, 1.0)
    deq = np.round((g - lo) / scale) * scale + lo
    out = deq.reshape(*shape[:-1], -1)[..., :n]
    return np.moveaxis(out, -1, axis)


def _attention(q, k, v):
    s = q @ k.T / np.sqrt(k.shape[1])
    s -= s.max(1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(1, keepdims=True)
    return p @ v


def _apply(fmt: KvFormat, k, v, heavy):
    """Quantize each token class of K (per-channel groups) and V (per-token groups)."""
    kq, vq = k.copy(), v.copy()
    n = len(k)
    cls = np.full(n, "routine", dtype=object)
    cls[heavy] = "outliers" if fmt.outlier_fraction > 0 else "routine"
    if fmt.recent:
        cls[max(n - fmt.recent, 0):] = "recent"
    cls[: min(fmt.sinks, n)] = "sinks"
    bits = {"sinks": (fmt.sink_bits,) * 2, "recent": (fmt.recent_bits,) * 2,
            "outliers": (fmt.outlier_bits,) * 2,
            "routine": (fmt.routine.key_bits, fmt.routine.value_bits)}
    group = min(fmt.group_size, HEAD_DIM)
    for name, (kb, vb) in bits.items():
        idx = np.flatnonzero(cls == name)
        if len(idx) == 0:
            continue
        if fmt.element == "fp8" and kb < 16:
            kq[idx], vq[idx] = _fp8(k[idx]), _fp8(v[idx])
            continue
        kq[idx] = _quantize(k[idx], kb, min(group, len(idx)), axis=0)   # per-channel keys
        vq[idx] = _quantize(v[idx], vb, group, axis=1)                   # per-token values
    return kq, vq


def _fp8(x: np.ndarray) -> np.ndarray:
    """Round to e4m3: 3 mantissa bits, per-tensor scale to the format's max (448)."""
    scale = np.abs(x).max() / 448.0 or 1.0
    y = x / scale
    exp = np.floor(np.log2(np.maximum(np.abs(y), 2.0 ** -9)))
    step = 2.0 ** (exp - 3)
    return np.round(y / step) * step * scale


@lru_cache(maxsize=64)
def attention_rel_error(fmt: KvFormat, seed: int = 0) -> float:
    """Relative L2 error of the attention output under `fmt` (0 for an unquantized cache)."""
    if fmt.is_unquantized:
        return 0.0
    q, k, v, heavy = _synthetic(seed)
    exact = _attention(q, k, v)
    kq, vq = _apply(fmt, k, v, heavy)
    approx = _attention(q, kq, vq)
    return float(np.linalg.norm(approx - exact) / np.linalg.norm(exact))
