"""The planned rows of issue 44's library-stack measurements, without torch: shared by
calibration/measure_gemlite.py and calibration/measure_quantized_cache.py (the H200 scripts),
validation/predict_library_stacks.py (the predictions written before they run) and the tests."""

from __future__ import annotations

import math

from fast_grid import model_shapes

# ----------------------------------------------------------------------------- gemlite GEMMs
MODELS = ["mixtral-8x7b", "qwen3-30b-a3b"]
ROWS = [1, 2, 4, 8, 16, 32, 64]
BITS = [4, 2, 8]                 # in order of importance: the budget cuts the last first
GROUP = 64
PACKING = 32                     # gemlite's default packing width (int32 containers)
BF16_TYPE_ID = 1                 # gemlite's type_id: input dtype (bf16 tunes as fp16: 1) x 100 + bits


def matmul_type(m: int, bits: int) -> str:
    """gemlite 0.6's kernel choice by rows (gemlite.core.get_matmul_type, non-MX)."""
    if m >= 64:
        return "GEMM"
    if m > (4 if bits < 8 else 2):
        return "GEMM_SPLITK"
    return "GEMV_REVSPLITK" if bits < 8 else "GEMV_SPLITK"


def signature(m: int, n: int, k: int, group: int, bits: int) -> str:
    """The config cache's key (gemlite's pruners: closest m, n, k, group, elements per int32, type)."""
    return str((m, n, k, group, PACKING // bits, BF16_TYPE_ID * 100 + bits))


def nearest_config(cache: dict, kind: str, m: int, n: int, k: int, group: int, bits: int):
    """(config, source) for one row from gemlite's H100 cache: the exact signature, else the
    4-bit-or-same-width entry of the same kernel nearest in log m, log n, log k, then group."""
    entries = cache.get(kind, {})
    sig = signature(m, n, k, group, bits)
    if sig in entries:
        return dict(entries[sig]), f"h100.json exact {sig}"
    best, best_key = None, None
    for key, cfg in entries.items():
        km, kn, kk, kg, ke, kt = eval(key)           # the file's keys are Python tuples as strings
        grouped = kt % 100 in (bits, 4) and 16 <= kg < kk    # a grouped INT entry (the file's 8-bit
        d = (not grouped,                                     # ones are channel-wise: used last)
             abs(math.log2(km / m)) + abs(math.log2(kn / n)) + abs(math.log2(kk / k)),
             kg != group, kt % 100 != bits)
        if best is None or d < best:
            best, best_key = d, key
    if best_key is None:
        return None, "none: gemlite's default config"
    cfg = dict(entries[best_key])
    elems = PACKING // bits
    bk = min(cfg["BLOCK_SIZE_K"], group)         # as gemlite's own pruners clamp it
    if kind == "GEMV_REVSPLITK":                     # its split-K of 2 loads a group's scales once
        while bk * 2 > group and bk > 8:
            bk //= 2
    cfg["BLOCK_SIZE_K"] = max(bk, elems)
    return cfg, f"h100.json nearest {best_key} for {sig}"


def fill_cache(cache: dict, rows) -> dict:
    """gemlite's config cache for every planned row: {kind: {signature: config}}, and each
    row's (config, source)."""
    out, chosen = {}, {}
    for m, n, k, bits in rows:
        kind = matmul_type(m, bits)
        cfg, source = nearest_config(cache, kind, m, n, k, GROUP, bits)
        chosen[(m, n, k, bits)] = (cfg, source)
        if cfg is not None:
            out.setdefault(kind, {})[signature(m, n, k, GROUP, bits)] = cfg
    return out, chosen


def gemm_plan(models, rows_m, bits_list, dev):
    """(model, label, m, k, n, impl bits or None for bf16) in order of importance: expert
    shapes of each model first, then attention; per shape and m, every width then bf16."""
    out = []
    for model in models:
        shapes = model_shapes(model) if dev == "cuda" else [("dry", 256, 128)]
        shapes = sorted(shapes, key=lambda s: not s[0].startswith("expert"))
        for label, k, n in shapes:
            for m in rows_m:
                out += [(model, label, m, k, n, b) for b in bits_list] + [(model, label, m, k, n, None)]
        if dev != "cuda":
            break
    return out


# ----------------------------------------------------------------------------- QuantizedCache steps
CACHES = {"bf16": None, "hqq2": 2, "hqq4": 4}          # name -> HQQ bits (None: DynamicCache)
KV_GROUP, RESIDUAL = 64, 128                           # q_group_size, residual_length
POINTS = [(1, 32768), (1, 65536), (1, 8192), (4, 32768), (4, 8192), (4, 65536)]   # (batch, context)
WARM, TIMED, PROFILED = 3, 12, 4                       # steps; the profiler records the last 2
FLUSH_AT = WARM + TIMED + PROFILED + 1                 # the step on which the residual flushes
RESIDUAL_FILL = RESIDUAL - FLUSH_AT                    # bf16 residual tokens at the first step


def step_plan(models, caches, points):
    """(model, batch, context, cache) in order of importance: each point's caches together."""
    return [(m, b, c, k) for m in models for b, c in points for k in caches]
