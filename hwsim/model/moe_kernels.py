"""Kernel builders for the production MoE schedules and weight-only quantized GEMMs.

Each mirrors a kernel measured on the H200 with CUPTI (calibration/measure_moe_kernels.py,
calibration/data/h200_moe_kernels.jsonl; calibration/compare_moe_kernels.py holds every
builder against its rows):

- `grouped_gemm`: torch._grouped_mm on sm90, PyTorch's CUTLASS ptr-array grouped GEMM
  (aten/src/ATen/native/cuda/GroupMM.cu). With at most 128 rows per group on average it is
  the ping-pong kernel with a 64 x 128 x 128 tile and a 2 x 1 x 1 cluster (the traced name:
  MainloopSm90ArrayTmaGmmaWarpSpecialized<4 stages, cluster 2x1x1>, KernelPtrArrayTma-
  WarpSpecializedPingpong, tile 64 x 128 x 128, validation/data/h200_moe_step_kernels.csv.xz); its persistent grid
  is one CTA per SM (132, as measured) walking the tiles of every group. Each group's M tiles
  are rounded up to the cluster, and the two CTAs of a cluster share the weight tile by TMA
  multicast, each loading half of it.
- `fused_moe_gemm`: the Triton fused-MoE kernel (vLLM's fused_moe_kernel design): one program
  per (BM-row block of one expert's sorted rows, BN columns), grid over the padded block
  count; programs past the real blocks exit at once.
- `weight_only_gemm`: a weight-only low-bit GEMM that expands codes in software
  (torch._weight_int4pack_mm, tinygemm): one 64-thread block per 8 output columns and 16 rows.
"""

from __future__ import annotations

import math

import numpy as np

from hwsim.hw.chip import ChipSizes
from hwsim.metrics import Component
from hwsim.model import ops
from hwsim.model.kernel import Kernel
from hwsim.model.weight_format import (DEQUANT_OPS_PER_WEIGHT, DEQUANT_OPS_PER_WEIGHT_ROW,
                                       DEQUANT_TILE_N, DEQUANT_TILE_ROWS)

GROUPED_TILE_M, GROUPED_TILE_N, GROUPED_TILE_K = 64, 128, 128
GROUPED_CLUSTER_M = 2
# Bytes each CTA of the grouped kernel keeps in flight from HBM. Its measured streaming rate
# is 20-24 GB/s per SM whatever the load (Mixtral, Qwen3, OLMoE shapes at 1-256 tokens: 19-24
# GB/s per CTA from 1.5 to 31 rounds of tiles), well under a cuBLAS decode GEMM's 31-45: fitted
# to the 54 grouped-GEMM rows of h200_moe_kernels.jsonl (median 6%), about 10 KB against the
# 16 KB half-tile of one of its 4 stages (the multicast stage is refilled only when both CTAs of
# the cluster have released it).
GROUPED_INFLIGHT_BYTES = 8.0 * 1024
GROUPED_INFLIGHT_PER_DOUBLING = 0.07
GROUPED_START_TRIPS = 5      # as a cuBLAS GEMM: tensor-map fetch, barrier and cluster setup
# Triton fused MoE (calibration/moe_impls.py, vLLM's get_default_config without a tuned file):
# BM 16 / BN 32 / BK 64 while tokens <= experts, else 64 / 64 / 32; 3 stages, 4 warps.
FUSED_STAGES = 3
# Stages of weight loads a program keeps in flight. One: alone on an SM (Mixtral T = 1: 256
# down-projection programs of 917 KB for 132 SMs) a program streams 9.2 GB/s, 4 KB per
# ~0.4 us round trip, so the K loop runs unpipelined: the rows it gathers come through
# pointers loaded from the sorted token ids (h200_moe_kernels.jsonl).
FUSED_STAGES_IN_FLIGHT = 1
FUSED_THREADS = 128
# Registers per thread of the two configurations (CUPTI, h200_moe_kernels.jsonl): with the
# stages' shared memory they set how many programs an SM holds, and so its bytes in flight
FUSED_REGS = {16: 38, 64: 62}
SM_THREADS, SM_REGISTERS = 2048, 65536
# The 64-row configuration loads each weight row 32 elements (64 bytes) at a time, the 16-row
# one 64 (128 bytes, a whole L2 line). Streaming 64-byte pieces of rows 8-28 KB apart, HBM
# delivers 2.6-3.1 TB/s where 128-byte pieces get 4.0-4.4 (the same kernel's two
# configurations on the same weights, h200_moe_kernels.jsonl: Mixtral T = 8 against 16-128,
# Qwen3 T = 128 against 256, OLMoE T = 64 against 128-256): charged as more bytes from HBM for
# pieces shorter than a line, the factor fitted to the 16 BM-64 kernel rows (median 6.6%).
L2_LINE_BYTES = 128
SHORT_SEGMENT_HBM_FACTOR = 1.65


def fused_config(tokens: int, experts: int) -> tuple[int, int, int]:
    return (16, 32, 64) if tokens <= experts else (64, 64, 32)


def grouped_gemm(name: str, layer: int, rows: list[int], k: int, n: int, chip: ChipSizes, *,
                 weight_addr: int, weight_bytes: float, data: Component, writes=(),
                 dtype: str = "bf16", dequant: str = "native",
                 on_chip: tuple[float, ...] | None = None, kernel=None) -> Kernel:
    """One grouped GEMM over the active experts; `rows` are the tokens each one got, `on_chip`
    the share of each one's weights resident in on-chip SRAM (none: all in HBM)."""
    n_tiles = math.ceil(n / GROUPED_TILE_N)
    counts = np.asarray(rows, dtype=np.int64)
    m_tiles = -(-counts // GROUPED_TILE_M)                       # ceil in integers, vectorised
    per_expert = -(-m_tiles // GROUPED_CLUSTER_M) * GROUPED_CLUSTER_M * n_tiles    # an idle expert: none
    tiles = int(per_expert.sum())
    m = max(rows)
    active = counts[counts > 0]
    mean_rows = int(active.sum()) / max(1, len(active))
    # each CTA streams its half of the cluster's weight tile; the rows (A) come from L2
    # through the same TMA pipeline but are not what limits it (rate independent of rows)
    weights = GROUPED_TILE_N * k * weight_bytes / GROUPED_CLUSTER_M
    sram = weights * resident_share(per_expert.tolist(), on_chip)
    return Kernel(
        name=name, layer=layer, tiles=max(tiles, 1),
        hbm_read=weights - sram, l2_read=sram, sram_read=sram,
        l2_write=min(m, GROUPED_TILE_M) * GROUPED_TILE_N * ops.ACT_BYTES,
        tensor_flops=2.0 * GROUPED_TILE_M * GROUPED_TILE_N * k,
        smem_bytes=chip.smem_bytes_per_sm,
        inflight_bytes=GROUPED_INFLIGHT_BYTES * (1 + GROUPED_INFLIGHT_PER_DOUBLING * math.log2(
            min(GROUPED_TILE_M, max(1.0, mean_rows)))),
        start_trips=GROUPED_START_TRIPS, address=weight_addr, data=data,
        compute=Component.DEQUANT if dequant == "software" else Component.GEMM_COMPUTE, writes=writes,
        dtype=dtype, **expand_codes(dequant, GROUPED_TILE_N * k, min(m, GROUPED_TILE_M), kernel))


def fused_moe_gemm(name: str, layer: int, rows: list[int], tokens: int, experts: int, k: int, n: int,
                   chip: ChipSizes, *, weight_addr: int, weight_bytes: float, data: Component,
                   writes=(), dequant: str = "native", on_chip: tuple[float, ...] | None = None,
                   kernel=None) -> Kernel:
    """One projection of the fused MoE over the active experts' row blocks.

    The grid covers the worst-case padded block count; programs past the real blocks read the
    padded total and exit, so the work is averaged over the whole grid. A block after an
    expert's first re-reads the same weight columns: from L2 when the expert's projection fits
    in half of it, else from HBM again (Mixtral's 235 MB gate+up does not). Each program keeps
    FUSED_STAGES - 1 stages of loads in flight, and an SM holds as many programs as its
    threads, registers and shared memory allow; the engine's per-SM block slots
    (chip.cta_slots_per_sm) carry those programs' bytes in flight between them. `on_chip`: the
    share of each expert's weights resident in on-chip SRAM, read from there at every block.
    """
    bm, bn, bk = fused_config(tokens, experts)
    active = [r for r in rows if r > 0]
    blocks = sum(math.ceil(r / bm) for r in active)
    first = len(active)
    n_tiles = math.ceil(n / bn)
    w_tile = bn * k * weight_bytes
    again_hbm = n * k * weight_bytes > chip.l2_bytes / 2
    repeat = blocks - first
    # the weight columns each expert's blocks stream from HBM (its first block, and every later
    # one where they do not stay in L2), less its share resident in SRAM, read from there
    streamed = [1 + (math.ceil(r / bm) - 1) * again_hbm if r > 0 else 0 for r in rows]
    weights = w_tile * n_tiles * sum(streamed)
    sram = weights * resident_share(streamed, on_chip)
    hbm = weights - sram
    # a piece shorter than a line costs HBM more time per byte, but it is still one load: the
    # factor scales the bytes in flight alike, so a latency-bound program makes the same round
    # trips (FP8 weights at BK 64 load as many pieces as bf16 does, each half as long)
    short = SHORT_SEGMENT_HBM_FACTOR if bk * weight_bytes < L2_LINE_BYTES else 1.0
    hbm *= short
    l2 = (w_tile * repeat * (not again_hbm) + blocks * min(max(active), bm) * k * ops.ACT_BYTES) * n_tiles + sram
    stage = bn * bk * weight_bytes + bm * bk * ops.ACT_BYTES
    resident = min(SM_THREADS // FUSED_THREADS, chip.smem_bytes_per_sm // (FUSED_STAGES * stage),
                   SM_REGISTERS // (FUSED_REGS[bm] * FUSED_THREADS))
    # one engine block slot stands for `group` resident programs (the SM holds `resident` of
    # them, the engine cta_slots_per_sm slots); the programs past the real blocks exit at once
    group = max(1.0, resident / chip.cta_slots_per_sm)
    programs = blocks * n_tiles
    tiles = max(1, math.ceil(programs / group))
    per = programs / tiles
    return Kernel(
        name=name, layer=layer, tiles=tiles, hbm_read=hbm / tiles, l2_read=l2 / tiles, sram_read=sram / tiles,
        l2_write=per * bm * bn * ops.ACT_BYTES, tensor_flops=per * 2.0 * bm * bn * k,
        inflight_bytes=per * bn * bk * weight_bytes * short * FUSED_STAGES_IN_FLIGHT,   # masked rows load nothing
        round_trips=2,           # the sorted token ids, then the rows they name
        address=weight_addr, data=data, writes=writes,
        compute=Component.DEQUANT if dequant == "software" else Component.GEMM_COMPUTE, **expand_codes(dequant, per * bn * k, min(max(active), bm), kernel))


def resident_share(reads: list[float], on_chip: tuple[float, ...] | None) -> float:
    """Share of a kernel's weight reads served by SRAM: each expert's `reads` (in any unit),
    weighted by the share of its weights resident there (`on_chip`, the same order)."""
    if not on_chip:
        return 0.0
    return sum(r * o for r, o in zip(reads, on_chip, strict=True)) / max(sum(reads), 1e-30)


def expand_codes(dequant: str, weights: float, rows: int, kernel=None) -> dict:
    """Kernel fields for a tile that expands `weights` sub-byte codes before its MMAs: in
    software at the cost of its kernel family (hwsim.model.dequant_kernels; None: measured for
    tinygemm, hwsim.model.weight_format), or by a native decoder. Not measured inside grouped
    or fused kernels (docs/weights.md)."""
    if dequant == "software":
        return {"int_ops": _ops_per_weight(kernel, rows) * weights}
    if dequant == "decoder":
        return {"decoder_elements": weights}
    return {}


def _ops_per_weight(kernel, rows: int) -> float:
    if kernel is not None:
        return kernel.ops(rows)
    return DEQUANT_OPS_PER_WEIGHT + DEQUANT_OPS_PER_WEIGHT_ROW * min(rows, DEQUANT_TILE_ROWS)


def weight_only_gemm(name: str, layer: int, m: int, k: int, n: int, chip: ChipSizes, *,
                     weight_addr: int, weight_bytes: float, data: Component, writes=(),
                     kernel=None) -> Kernel:
    """y = x @ dequant(W)^T with W's codes expanded in registers (tinygemm's tiling), at the
    naive family's cost (`kernel`, None: the fit in hwsim.model.weight_format)."""
    m_tiles = math.ceil(m / DEQUANT_TILE_ROWS)
    tiles = math.ceil(n / DEQUANT_TILE_N) * m_tiles
    weights = DEQUANT_TILE_N * k
    rows = min(m, DEQUANT_TILE_ROWS)
    return Kernel(
        name=name, layer=layer, tiles=tiles,
        hbm_read=weights * weight_bytes / m_tiles,
        l2_read=weights * weight_bytes * (m_tiles - 1) / m_tiles + rows * k * ops.ACT_BYTES,
        l2_write=rows * DEQUANT_TILE_N * ops.ACT_BYTES,
        tensor_flops=2.0 * ops.MMA_M * DEQUANT_TILE_N * k,
        int_ops=_ops_per_weight(kernel, rows) * weights,
        round_trips=2,       # each K step waits on the group's scales and zeros, then its codes
        address=weight_addr, data=data, compute=Component.DEQUANT, writes=writes, mma_sync=True)
