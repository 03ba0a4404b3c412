"""gemlite's launch config for a GEMM, as calibration/measure_gemlite.py gave it to gemlite on the
H100 (issue 44, item 2): from the autotuned configs gemlite ships for that card.

hwsim/data/gemlite/h100.json is gemlite-0.6.0.post2's gemlite/configs/h100.json (Apache-2.0, by
Mobius Labs), each entry cut to the six numbers the kernels' grids and loops use: BLOCK_SIZE_M,
BLOCK_SIZE_N, BLOCK_SIZE_K, SPLIT_K (1 where the kernel has none), num_warps, num_stages.
The rule is calibration/library_grid.py's nearest_config (the one the measured rows ran with;
tests/test_gemlite_gemm.py checks both agree on every row): the exact signature, else the entry of
the same kernel nearest in log m, n and k, a grouped entry of the same or 4-bit width first.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hwsim.model.gemlite_gemm import LaunchConfig, matmul_type

CONFIG_DIR = Path(__file__).resolve().parents[1] / "data" / "gemlite"
PACKING_BITS = 32
BF16_TYPE_ID = 1            # gemlite's type id: input dtype (bf16 tunes as fp16: 1) x 100 + bits


def load_configs(card: str = "h100") -> dict[str, dict[tuple, LaunchConfig]]:
    """{kind: {(m, n, k, group, elements per int32, type id): config}} of one card's file."""
    raw = json.loads((CONFIG_DIR / f"{card}.json").read_text())
    return {kind: {tuple(int(x) for x in key.strip("()").split(",")): LaunchConfig(*v) for key, v in entries.items()}
            for kind, entries in raw.items()}


def pick_config(configs: dict, m: int, n: int, k: int, group: int, bits: int) -> tuple[LaunchConfig, str]:
    """(config, where it came from) for one GEMM: exact, else nearest, BLOCK_K clamped to the group
    and the packing as gemlite's pruners clamp it."""
    kind = matmul_type(m, bits)
    entries = configs.get(kind, {})
    sig = (m, n, k, group, PACKING_BITS // bits, BF16_TYPE_ID * 100 + bits)
    if sig in entries:
        return entries[sig], f"exact {sig}"
    if not entries:
        raise ValueError(f"gemlite configs: no {kind} entry to take a config from")

    def distance(key):
        km, kn, kk, kg, _, kt = key
        grouped = kt % 100 in (bits, 4) and 16 <= kg < kk
        return (not grouped, abs(math.log2(km / m)) + abs(math.log2(kn / n)) + abs(math.log2(kk / k)),
                kg != group, kt % 100 != bits)

    key = min(entries, key=distance)       # first of equals, in the file's order (as library_grid)
    cfg = entries[key]
    bk = min(cfg.block_k, group)
    if kind == "GEMV_REVSPLITK":           # its split-K of 2 loads a group's scales once
        while bk * 2 > group and bk > 8:
            bk //= 2
    cfg = LaunchConfig(cfg.block_m, cfg.block_n, max(bk, PACKING_BITS // bits), cfg.split_k, cfg.num_warps,
                       cfg.num_stages)
    return cfg, f"nearest {key}"
