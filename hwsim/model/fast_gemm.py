"""The fast W4A16 GEMM of calibration/fast_w4a16.py as hwsim kernels (kernel family `fast`,
hwsim.model.dequant_kernels): its lane-op counts fitted to an H100's timings (issue 44).

The weights are the wgmma's M side, FAST_TILE_N output columns a program, the batch (padded to
a power of two, 16 to 64 rows) its N side; K is split so the grid fills about two waves, and a
second kernel sums the split-K partials. Its SASS shows HGMMA, so the MMA is not mma.sync. The
per-weight int-lane ops come from the family (its SASS counts at 16 and 64 rows). Past 64 rows
each 64-row tile expands the codes again (the codes re-read from L2).
"""

from __future__ import annotations

import math

from hwsim.hw.chip import ChipSizes
from hwsim.metrics import Component
from hwsim.model import ops
from hwsim.model.dequant_kernels import fast_tile_rows
from hwsim.model.kernel import Kernel

FAST_TILE_N = 128          # output columns a program (calibration/fast_grid.py W4_BN, the SASS's BN)
FAST_GROUP = 128           # K per scale group and per K tile
SPLIT_WAVES = 2            # split-K fills about two waves of programs
FAST_THREADS = 128         # 4 warps a program (calibration/fast_w4a16.py's default)
# (shared memory bytes, registers per thread) of _w4a16 at BN 128, BK 128, 3 stages, inline PTX, by
# padded rows: compiled for sm_90a by Triton 3.6, the H100 call's (calibration/fast_occupancy.py --w4a16)
FAST_PROGRAM = {16: (24832, 96), 32: (33024, 167), 64: (49408, 250)}
# lane ops per weight its main loop issues at 16 and 64 padded rows (inline PTX, BN 128): the SASS
# counts of calibration/fast_sass.py (calibration/data/fast_kernels_sass.txt)
FAST_LANES = (1.69, 2.64)


def fast_lanes(bm: int, lanes: tuple[float, float] = FAST_LANES) -> float:
    """Lane ops per weight at `bm` padded rows, linear between the 16- and 64-row counts."""
    return lanes[0] + (bm - 16) * (lanes[1] - lanes[0]) / 48


def fast_weight_only_gemm(name: str, layer: int, m: int, k: int, n: int, chip: ChipSizes, *,
                          weight_addr: int, weight_bytes: float, data: Component, ops_per_weight: float,
                          writes=(), lanes_per_weight: float | None = None) -> list[Kernel]:
    """y = x @ dequant(W)^T by the fast W4A16 kernel, split-K sum and cast included.
    `ops_per_weight` is a program's latency chain per weight (the fitted count), which the programs
    its SM holds as compiled (FAST_PROGRAM) overlap, its lanes (`lanes_per_weight`, default the
    SASS's FAST_LANES) issued one program at a time (Kernel.chain_ops): the rows past 16 cost more
    registers, fewer programs an SM, more rounds (issue 44: an H100's 32- and 64-row jumps)."""
    n_tiles = math.ceil(n / FAST_TILE_N)
    k_tiles = max(1, k // FAST_GROUP)
    split = max(1, min(k_tiles, math.ceil(SPLIT_WAVES * chip.sms / n_tiles)))
    split = math.ceil(k_tiles / math.ceil(k_tiles / split))
    chunk = k / split
    bm = fast_tile_rows(m)
    m_tiles = math.ceil(m / bm)
    rows = min(m, bm)
    weights = FAST_TILE_N * chunk * weight_bytes
    lanes = fast_lanes(bm) if lanes_per_weight is None else lanes_per_weight
    smem, regs = FAST_PROGRAM[bm]
    alu = dict(int_ops=lanes * FAST_TILE_N * chunk, chain_ops=max(lanes, ops_per_weight) * FAST_TILE_N * chunk,
               block_threads=FAST_THREADS, regs_per_thread=regs, smem_bytes=smem)
    main = Kernel(name=name, layer=layer, tiles=n_tiles * split * m_tiles,
                  hbm_read=weights / m_tiles, l2_read=weights * (m_tiles - 1) / m_tiles + rows * chunk * ops.ACT_BYTES,
                  l2_write=rows * FAST_TILE_N * (4 if split > 1 else 2), tensor_flops=2.0 * FAST_TILE_N * bm * chunk,
                  **alu, address=weight_addr,
                  data=data, compute=Component.DEQUANT, writes=() if split > 1 else writes)
    if split == 1:
        return [main]
    # the launcher's epilogue, partial.sum(0).half(): a reduce into fp32, then a cast (two kernels)
    return [main, ops.elementwise(f"{name}.sum", layer, split * m * n * 4, m * n * 4, 0.25, chip),
            ops.elementwise(f"{name}.cast", layer, m * n * 4, m * n * 2, 0.25, chip, writes=writes)]
