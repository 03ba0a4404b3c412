"""The shapes and layouts of issue 31's fast-kernel measurements, without torch: shared by the
kernels (calibration/fast_kv_attn.py), the H200 script (calibration/measure_fast_kernels.py)
and the predictions written before it runs (calibration/fast_predictions.py)."""

from __future__ import annotations

import math
import os

import yaml

MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hwsim", "data", "models")
SMS = 132                          # H200 multiprocessors: what the split planning fills

GQA = dict(H=32, KVH=8, D=128)     # Mixtral-8x7B's attention
BATCHES = [1, 4, 16, 64]
CONTEXTS = [4096, 16384, 32768, 131072]
FLOOR_SHAPES = [(16, 32768), (64, 32768)]
FLOOR_GROUPS = [1, 4, 8, 16]
GEMM_ROWS = [1, 4, 16, 32, 64]
GEMM_MODELS = ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"]
KV_BLOCK = 128                     # the fast KV kernel's token block and warps (the `tune` part varies
KV_WARPS = 4                       # them): the fewest instructions per element without spills in
W4_BN = 128                        # calibration/fast_sass.py's count; W4A16's output columns a program

# KV layouts: name -> (class widths, the K token group and V channel group); hwsim's presets
# (hwsim/config/scenario.py KV_PRESETS): adaptive-2 = 4 sinks at 8 bits, 2% outliers at 4,
# routine 2; kivi-2 = routine 2 bits in groups of 32, the last 128 tokens at 16.
LAYOUTS = {
    "fast16": (dict(bits=16), 128),
    "fast2": (dict(bits=2), 128),
    "fast4": (dict(bits=4), 128),
    "adaptive2": (dict(bits=2, sinks=4, sink_bits=8, outlier_fraction=0.02, outlier_bits=4), 128),
    "kivi2": (dict(bits=2, recent=128, recent_bits=16), 32),
}


def class_widths(context: int, bits: int, sinks: int = 0, sink_bits: int = 8,
                 outlier_fraction: float = 0.0, outlier_bits: int = 8,
                 recent: int = 0, recent_bits: int = 16) -> dict[str, tuple[int, int]]:
    """Tokens and width of each class (hwsim.workload.kv_format's classes at this context)."""
    n_sinks = min(sinks, context)
    n_recent = min(recent, context - n_sinks)
    rest = context - n_sinks - n_recent
    n_out = int(round(rest * outlier_fraction))
    return {"sinks": (n_sinks, sink_bits), "outliers": (n_out, outlier_bits),
            "routine": (rest - n_out, bits), "recent": (n_recent, recent_bits)}


def segment_widths(classes: dict[str, tuple[int, int]]) -> list[tuple[int, int]]:
    """(bits, tokens) of each storage segment: classes of one width share one, in class order."""
    out: dict[int, int] = {}
    for count, bits in classes.values():
        if count:
            out[bits] = out.get(bits, 0) + count
    return list(out.items())


def layout(name: str, context: int, head_dim: int):
    """(classes, gk, gv) of a named layout at this context (gv capped at the head dim)."""
    widths, group = LAYOUTS[name]
    return class_widths(context, **widths), group, min(group, head_dim)


def plan_splits(widths: list[tuple[int, int]], rows: int, block: int, sms: int = SMS,
                waves: int = 4, min_blocks: int = 4) -> list[int]:
    """Splits per segment: about `waves` programs per SM in all, shared in proportion to each
    segment's bytes (a tiny sink segment gets one), at least `min_blocks` blocks each (so a
    program's setup, q and its scales, is spread over some work)."""
    weight = [bits * tokens for bits, tokens in widths]
    target = max(1, math.ceil(waves * sms / rows))
    return [max(1, min(math.ceil(tokens / (min_blocks * block)), round(target * w / sum(weight))))
            for (_, tokens), w in zip(widths, weight)]


def segment_bytes(bits: int, tokens: int, rows: int, head_dim: int, gk: int, gv: int) -> int:
    """Bytes the kernel reads for one segment: K and V codes (or fp16), K scale and zero per
    channel and gk-token group, V scale and zero per token and gv-channel group."""
    if bits == 16:
        return rows * tokens * head_dim * 2 * 2
    codes = 2 * rows * tokens * head_dim * bits // 8
    return codes + rows * 2 * 2 * (math.ceil(tokens / gk) * head_dim + tokens * head_dim // gv)


def model_shapes(name: str) -> list[tuple[str, int, int]]:
    """(label, k, n) of one model's weight GEMMs: experts' gate+up and down, a dense FFN's,
    and GQA attention's fused QKV and output projections (MLA's are not included)."""
    m = yaml.safe_load(open(os.path.join(MODELS_DIR, f"{name}.yaml")))
    d = m["hidden"]
    out = [("expert_gate_up", d, 2 * m["moe"]["expert_ffn"]), ("expert_down", m["moe"]["expert_ffn"], d)]
    if m.get("ffn"):
        out += [("dense_gate_up", d, 2 * m["ffn"]), ("dense_down", m["ffn"], d)]
    att = m["attention"]
    if att["kind"] == "gqa":
        hd = att["head_dim"]
        out += [("attn_qkv", d, (att["heads"] + 2 * att["kv_heads"]) * hd), ("attn_o", att["heads"] * hd, d)]
    return out
