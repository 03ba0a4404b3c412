"""gemlite 0.6's Triton A16Wn GEMV/GEMM (issue 44, item 2) as hwsim kernels: the kernel gemlite
runs for a row count, built from its launch config (the H100 tuning it ships, configs/h100.json).

Read from gemlite-0.6.0.post2's source (gemlite/core.py get_matmul_type, triton_kernels/*.py):
- GEMV_REVSPLITK (m <= 4 below 8 bits): one program per (row, BLOCK_N columns, 2 x BLOCK_K of K):
  grid M * N/BN * K/(2 BK). Each loads one group's scales and zeros, two BK x BN blocks of
  int32-packed codes, dequantizes them and reduces over K on the ALUs (no MMA), then atomically
  adds BN outputs: every row re-expands the codes, so its time grows with m.
- GEMV_SPLITK (m <= 2 at 8 bits): one program per (BLOCK_N columns, split), a loop over K in
  BK steps, ALU dot products, atomic adds across splits.
- GEMM_SPLITK (up to 63 rows) and GEMM (64 and more): BM x BN output tiles (split-K's atomically
  added), a loop over K in BK steps: load codes, scales and zeros, dequantize, tl.dot. The shipped
  H100 configs use num_stages 1: each step's loads are waited on (no software pipeline). GEMV_SPLITK's
  at num_stages 2 time as if waited on too (Mixtral's BLOCK_N 1 rows: about one HBM miss, 370 ns, a
  K step at either), so every K step is a round trip here.
Splits' atomics need a zeroed output: one fill kernel first (torch.zeros / the config's pre-hook).

The lanes a weight costs (dequant and, in the GEMVs, the fp32 dot) and the per-step latency are
the profile's `weights.gemlite` block, fitted by calibration/fit_gemlite.py (held-out split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwsim.hw.chip import ChipSizes
from hwsim.metrics import Component
from hwsim.model import ops
from hwsim.model.kernel import Kernel

PACKING_BITS = 32        # gemlite packs codes over K into int32 words
META_BYTES = 2 * 2       # a bf16 scale and a bf16 zero per group and column
OUT_BYTES = 2            # bf16 output; bf16 atomics are native on sm_90
WIDTHS = (1, 2, 4, 8)    # the code widths gemlite's INT kernels unpack


def matmul_type(m: int, bits: int) -> str:
    """gemlite 0.6's kernel by rows (gemlite.core.get_matmul_type, non-MX)."""
    if m >= 64:
        return "GEMM"
    if m > (4 if bits < 8 else 2):
        return "GEMM_SPLITK"
    return "GEMV_REVSPLITK" if bits < 8 else "GEMV_SPLITK"


@dataclass(frozen=True)
class LaunchConfig:
    """A gemlite launch config (its configs/<gpu>.json entries' keys)."""
    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 1

    @classmethod
    def from_gemlite(cls, cfg: dict) -> "LaunchConfig":
        return cls(cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"], cfg["BLOCK_SIZE_K"], cfg.get("SPLIT_K", 1),
                   cfg["num_warps"], cfg["num_stages"])


@dataclass(frozen=True)
class GemliteCosts:
    """Fitted ALU lanes per weight of each kernel kind and the latency of one K step."""
    gemv_ops_per_weight: float       # GEMV_REVSPLITK / GEMV_SPLITK: dequant + fp32 dot, per row
    gemm_ops_per_weight: float       # GEMM_SPLITK / GEMM: dequant (the MMA does the dot)
    step_trips: tuple[tuple[str, float], ...]   # per kind: dependent round trips one K step waits on

    def trips(self, kind: str) -> float:
        return dict(self.step_trips)[kind]


# FITTED on an H100 (calibration/fit_gemlite.py, calibration/data/fit_gemlite_h100_s22.txt): on the
# Mixtral-8x7B rows of calibration/data/h100_gemlite.jsonl (84), Qwen3-30B-A3B's 62 held out
# (fit median 4.6%, held-out 7.2%; GEMV_SPLITK's small 8-bit rows are not captured: the compare file)
H100_COSTS = GemliteCosts(gemv_ops_per_weight=5.25, gemm_ops_per_weight=8.25,
                          step_trips=(("GEMV_REVSPLITK", 1.25), ("GEMV_SPLITK", 1.0),
                                      ("GEMM_SPLITK", 1.0), ("GEMM", 1.75)))


@dataclass(frozen=True)
class _Grid:
    programs: int
    m_tiles: int
    rows: int            # rows a program computes (of the real m)
    pad_rows: int        # rows its MMA is padded to
    cols: int
    k_chunk: float       # K a program covers
    steps: int           # K steps its loop waits on
    split: int


def _grid(kind: str, m: int, k: int, n: int, cfg: LaunchConfig) -> _Grid:
    n_tiles = math.ceil(n / cfg.block_n)
    if kind == "GEMV_REVSPLITK":       # BLOCK_M is 1; two BK stages, loads issued together
        split = math.ceil(k / (2 * cfg.block_k))
        return _Grid(m * n_tiles * split, m, 1, 1, cfg.block_n, 2 * cfg.block_k, 1, split)
    split = cfg.split_k
    m_tiles = math.ceil(m / cfg.block_m)
    chunk = k / split
    steps = max(1, math.ceil(chunk / cfg.block_k))
    if kind == "GEMV_SPLITK":
        return _Grid(m * n_tiles * split, m, 1, 1, cfg.block_n, chunk, steps, split)
    return _Grid(m_tiles * n_tiles * split, m_tiles, min(m, cfg.block_m), cfg.block_m, cfg.block_n,
                 chunk, steps, split)


def gemlite_gemm(name: str, layer: int, m: int, k: int, n: int, bits: int, group: int, cfg: LaunchConfig,
                 costs: GemliteCosts, chip: ChipSizes, *, weight_addr: int, data: Component,
                 writes=()) -> list[Kernel]:
    """y[m, n] = x[m, k] @ dequant(W[n, k])^T as gemlite runs it: the zero fill its split-K
    atomics need, then its kernel's grid of programs."""
    if bits not in WIDTHS:
        raise ValueError(f"gemlite packs 1, 2, 4 or 8-bit codes, not {bits}-bit")
    kind = matmul_type(m, bits)
    g = _grid(kind, m, k, n, cfg)
    weights = g.cols * g.k_chunk
    # a group's scales and zeros come from HBM once: programs covering less K than a group (REVSPLITK)
    # share them, the others' loads of them hit in L2
    groups = g.k_chunk / group
    wbytes = weights * bits / 8 + g.cols * groups * META_BYTES
    shared_meta = g.cols * max(0.0, math.ceil(groups) - groups) * META_BYTES
    gemv = kind.startswith("GEMV")
    lanes = (costs.gemv_ops_per_weight if gemv else costs.gemm_ops_per_weight) * weights
    out = g.rows * g.cols * OUT_BYTES
    main = Kernel(name=name, layer=layer, tiles=g.programs,
                  hbm_read=wbytes / g.m_tiles, l2_read=wbytes * (g.m_tiles - 1) / g.m_tiles
                  + shared_meta + g.rows * g.k_chunk * ops.ACT_BYTES,
                  l2_write=out, int_ops=lanes,
                  tensor_flops=0.0 if gemv else 2.0 * g.pad_rows * g.cols * g.k_chunk,
                  mma_sync=g.pad_rows < 64, block_threads=32 * cfg.num_warps,
                  round_trips=costs.trips(kind) * g.steps, address=weight_addr, data=data,
                  compute=Component.DEQUANT, writes=writes)
    if g.split == 1:
        return [main]
    fill = ops.elementwise(f"{name}.zero", layer, 0, m * n * OUT_BYTES, 0.0, chip)
    return [fill, main]
