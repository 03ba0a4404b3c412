"""Kernel builders: how one operation splits into thread-block tiles with bytes and flops.

The tiling rules mirror the libraries the measured schedule calls (cuBLAS GEMMs, FlashAttention
split-KV decode, PyTorch element-wise and row kernels); their chip-specific knobs (GEMM tile
sizes, when split-K is used) come from the hardware profile, never from the model.
"""

from __future__ import annotations

import functools
import heapq
import math
from typing import NamedTuple

from hwsim.errors import ConfigError
from hwsim.hw.chip import ChipSizes
from hwsim.metrics import Component
from hwsim.model import ir
from hwsim.model.kernel import Kernel, Role, copy_kernel

ACT_BYTES = 2            # bf16 activations
ACC_BYTES = 4            # fp32 partial sums
MMA_M = 16               # smallest M of a tensor-core MMA (mma.sync m16n8k16): rows are padded to it
GEMM_K_TILE = 64         # K depth of one pipeline stage
GEMM_STAGES = 6          # TMA pipeline stages; all but the one consumed are in flight: 80 KB for a 64x64
                         # tile (Little's-law in-flight bytes fitted to the CUPTI times of the m <= 16
                         # cuBLAS GEMMs on their measured grids: 96-112 KB; 6 stages fit the 123 rows
                         # best together with GEMM_START_TRIPS, calibration/data/h200_gemm_kernels.jsonl)
GEMM_START_TRIPS = 5     # setup before the K loop streams (tensor-map fetch, barrier and cluster init,
                         # the first stage): the smallest nvjet GEMMs (3 blocks, 64 KB) take 3.7-3.8 us
CLUSTER_MULTICAST = 2    # Hopper GEMMs load shared operand tiles once per 2-CTA cluster (TMA multicast)
# cuBLAS's narrow-N decode GEMMs (nvjet ..._8x64_... / _16x64_..._TNN): for at most 8 rows, K under the
# split-K threshold and 8-31 column tiles of 64, cuBLAS spreads N over 96 blocks of 8-16 columns
# (k=2048, n=768 and 1536: calibration/data/h200_gemm_kernels.jsonl; Qwen3's gate+up GEMM in every
# profiled step, validation/data/h200_kernels*.csv). They take 6.5-7.5 us, 2.5-3 us more than their
# bytes need. Modelled as an MMA of 64 rows x NARROW_MMA_N columns per block whatever the 8-16 columns
# it keeps (the width fitted to those 6 isolated rows: 6.7 us against 6.5-7.5 measured). The
# block count is the chip's (gemm.narrow_n_blocks): cuBLAS on the H100 keeps its base 64x8
# kernel (24 blocks) for the same GEMM (validation/data/harness_traces_h100), so its profile has 0.
NARROW_MAX_ROWS = 8
NARROW_MIN_TILES = 8
NARROW_MAX_TILES = 32
NARROW_MMA_N = 80
# For more rows than one base tile, cuBLAS's sm90 kernels (nvjet) size the tile to the problem:
# every recorded mid-size grid is one wave of 88-132 blocks, with tile sides such as 48, 80, 96,
# 112, 144, 176 and 192 (calibration/data/h200_gemm_kernels.jsonl: 80x128 tiles for m=256,
# n=5120; 192x128 for m=512, n=6144; 112x128 for m=128, n=14336; 64x64 for m=256, n=2048).
# Modelled as the tile of least work per SM among those whose grid fits one wave: sides in
# steps of WAVE_TILE_STEP up to WAVE_TILE_MAX, one of them whole wgmma M blocks (WGMMA_M rows),
# at most the largest recorded tile's area; a problem no such tile fits in one wave keeps the
# large persistent tiles below.
WAVE_TILE_STEP = 16
WAVE_TILE_MAX = 256
WAVE_TILE_AREA_MAX = 256 * 128
WGMMA_M = 64
ELEMENTWISE_TILE_BYTES = 16 * 1024   # bytes one element-wise thread block handles (4 warps x 16 B x 256)
TI_BLOCK_ELEMS = 512     # PyTorch's non-vectorised elementwise_kernel<128, 4>: 128 threads x 4 elements
TI_OPS_PER_ELEM = 40     # integer ops per element of that kernel (TensorIterator offset arithmetic per
                         # operand, scalar loads and stores): strided SiLU / multiply and broadcast scale
                         # run at 1.3-1.7 elements per clock per SM (calibration/data/h200_small_kernels.jsonl)
TI_BLOCK_THREADS = 128   # its blocks (4 warps): 16 resident per SM
TI_ALU_CHAIN = 3.6       # a block alone takes 3.6x its share of the SM's integer issue: its offset
                         # arithmetic is a dependent chain. Measured, these kernels last 1.9-2.1 us
                         # from 1 to ~5 blocks per SM, then 0.16 us more per further block per SM,
                         # as at 100 (calibration/data/h200_small_kernels.jsonl); 3.6 of the whole-
                         # step calibration rows' (mean |error| 3.26% -> 3.16%), 4.3 of the isolated
                         # floors alone
L2_ATOMIC_BYTES = 64     # an atomic add holds an L2 slice as long as a 64-B transfer: index_add_ on bf16
                         # adds 142-145 G elements/s at 256-1024 rows (same data), about 10 TB/s / 64 B
ROW_CHUNK_ELEMS = 1024   # elements a row kernel's block covers per loop iteration (128 threads x 8)
ROW_ROUND_TRIPS = 3      # per chunk: load x to reduce, then reload x and the weight to normalise
ATTN_BLOCK_N = 128       # KV rows per FlashAttention block
ATTN_BLOCK_M = 128       # query rows per FlashAttention prefill tile
SOFTMAX_OPS = 5          # max, subtract, exp, sum, rescale per score
COMBINE_ROUND_TRIPS = 8  # split-KV combine: its fixed chain of dependent loads and the final store: 2.6 us at
                         # 2 splits less the per-split loop (calibration/data/h200_small_kernels.jsonl)
COMBINE_TRIPS_PER_SPLIT = 1.35   # and one loop iteration per split: 0.20 us per split measured (flash
                                 # combine kernel, 2-65 splits, calibration/data/h200_small_kernels.jsonl)
FAST_COMBINE_THREADS = 128   # the fast KV kernel's combine: num_warps=4 (calibration/fast_kv_attn.py)
ATTN_ROUND_TRIPS = 8     # FlashAttention tile: Q, K block, softmax, V block, partial output and LSE stores
                         # in sequence: 4.7 us for one tiny split-KV tile (h200_small_kernels.jsonl B=1 L=128)
# FlashAttention-2 decode (PyTorch SDPA, flash backend). With one query per sequence and GQA the
# query heads of a KV head are swapped into the M dimension (seqlenq_ngroups_swapped), so one
# program owns a (sequence, KV head) pair; its M tile is still computed whole: the padded rows
# cost tensor-core time. Constants from flash_api.cpp / flash_fwd_launch_template.h.
FA2_BLOCK_M = 128        # flash_fwd_kernel, head dim 128: Flash_fwd_kernel_traits<128, 128, 64, 4>
FA2_BLOCK_N = 64
FA2_SPLIT_BLOCK_M = 64   # flash_fwd_splitkv_kernel: 64 query rows a block
FA2_MAX_SPLITS = 128
FA2_SPLIT_WAVE_SMS = 2   # the split heuristic counts 2 blocks per SM (multiProcessorCount * 2)
# cuDNN's SDPA decode kernel (PyTorch's default backend on the H200 for these shapes; measured
# grids and times in calibration/data/h200_attention_backends.jsonl): it splits the context so
# that about 256 blocks run (grids 32x8x1 at B=1, 4x8x8 at B=8, 1x8x32 at B=32 with 8 KV heads),
# its M tile is at most 64 rows (at 128 it would be MMA-bound at 760 us for B=32, L=16k; it runs
# at HBM speed, 478 us), and a split context is merged by one short reduction kernel (2.1-2.8 us
# whatever the split count).
CUDNN_TARGET_BLOCKS = 256
CUDNN_BLOCK_M = 64
CUDNN_REDUCE_ROUND_TRIPS = 8


def _roundup(x: int, m: int) -> int:
    return -(-x // m) * m


@functools.lru_cache(maxsize=4096)
def one_wave_tile(m: int, n: int, sms: int) -> tuple[int, int] | None:
    """(tile_m, tile_n) of the least work per SM (tile area, then the operand rows it loads per
    K step; the taller tile on a tie) among the tiles whose grid fits in one wave of `sms`
    blocks; None when none does."""
    best = None
    sizes = range(WAVE_TILE_STEP, WAVE_TILE_MAX + 1, WAVE_TILE_STEP)
    for tm in sizes:
        for tn in sizes:
            if (tm % WGMMA_M and tn % WGMMA_M) or tm * tn > WAVE_TILE_AREA_MAX:
                continue
            if math.ceil(m / tm) * math.ceil(n / tn) > sms:
                continue
            key = (min(tm, m) * min(tn, n), tm + tn, -tm)
            if best is None or key < best[0]:
                best = (key, (tm, tn))
    return best[1] if best else None


class GemmTiling(NamedTuple):
    """A GEMM's launch as gemm() chooses it (its docstring says how): the tile, the M tiles, the
    tiles of one K split, the MMA shape one tile issues per K step, and the K splits."""
    tile_m: int
    tile_n: int
    m_tiles: int
    base: int
    mma_m: int
    mma_n: int
    split: int


def gemm_tiling(m: int, k: int, n: int, chip: ChipSizes) -> GemmTiling:
    tile_m, tile_n = chip.gemm_tile_m, chip.gemm_tile_n
    one_wave = one_wave_tile(m, n, chip.sms) if m > tile_m else None
    if one_wave:
        tile_m, tile_n = one_wave
    elif math.ceil(m / (2 * tile_m)) * math.ceil(n / (4 * tile_n)) >= chip.sms:
        tile_m, tile_n = 2 * tile_m, 4 * tile_n
    elif m > 2 * tile_m and math.ceil(m / (2 * tile_m)) * math.ceil(n / (2 * tile_n)) >= chip.sms // 2:
        tile_m, tile_n = 2 * tile_m, 2 * tile_n
    elif tile_m < m <= 2 * tile_m:
        tile_m = 2 * tile_m
    m_tiles, n_tiles = math.ceil(m / tile_m), math.ceil(n / tile_n)
    base = m_tiles * n_tiles
    mma_m, mma_n = min(_roundup(min(m, tile_m), MMA_M), tile_m), tile_n
    narrow = chip.gemm_narrow_n_blocks
    if narrow and m <= NARROW_MAX_ROWS and k < chip.gemm_split_k_min_k and NARROW_MIN_TILES <= base < NARROW_MAX_TILES:
        # cuBLAS's narrow-N kernels: N spread over the chip's narrow_n_blocks blocks of 8-16
        # columns, each paying a wide MMA per K step
        tile_n = max(8, n // narrow)
        base = math.ceil(n / tile_n)            # one M tile: m <= 8 rows
        mma_m, mma_n = tile_m, NARROW_MMA_N     # the rows sit on wgmma's 64-row side (TNN)
    split = 1
    if 2 * base < chip.sms and k >= chip.gemm_split_k_min_k:
        split = max(1, min(chip.sms // base, math.ceil(k / chip.gemm_min_k_per_split)))
    return GemmTiling(tile_m, tile_n, m_tiles, base, mma_m, mma_n, split)


def gemm(name: str, layer: int, m: int, k: int, n: int, chip: ChipSizes, *, weight_addr: int,
         weight_bytes: float, data: Component, compute: Component = Component.GEMM_COMPUTE,
         weights_on_chip: float = 0.0, channel_group: int = -1,
         writes: tuple[str, ...] = (), dtype: str = "bf16",
         decoder_per_weight: float = 0.0) -> list[Kernel]:
    """y[m, n] = x[m, k] @ W[n, k]^T with W streamed from HBM once and x re-read from L2.

    Tile choice follows the library's habit: for more rows than the profile's tile, the tile
    that fills one wave with the least work per SM (one_wave_tile); where none does, the
    largest tile (2x the profile's in M, 4x in N) when that still gives a full wave of tiles;
    2x in both for more rows than two base tiles when that gives half a wave; a taller tile
    rather than two M tiles that would re-read the weights; cuBLAS's narrow-N kernels for a few
    rows and a few tiles (NARROW_*); else the profile's base tile. A grid under half the SMs
    with a deep K is split along K (cuBLAS split-K: K / min_k_per_split pieces, rounded
    up, at most SMs / tiles), which writes fp32 partials and adds a reduction kernel. Grids
    over the SMs run persistently, one block per SM (`balanced`, and the block claims the
    SM's shared memory: the sm90 kernels size their stage count to fill it). Each block keeps
    its pipeline's stages but the one being consumed in flight (TMA), far more than a plain
    load loop, and pays GEMM_START_TRIPS of setup. The share of the weights already resident
    in on-chip SRAM (`weights_on_chip`, 0..1) is read from there, not from HBM. `writes` names
    the output activation, on the kernel that writes y (the reduction under split-K).
    `weight_bytes` is the stored bytes per weight (hwsim.model.weight_format), `dtype` the
    tensor-core input type (an FP8 GEMM: cuBLAS's qqtst kernels keep the bf16 kernels' grid
    and stage bytes, K tile 128, calibration/data/h200_moe_kernels.jsonl), and
    `decoder_per_weight` the elements a native decoder expands per weight (what-if chips).
    """
    if min(m, k, n) < 1:     # a zero-sized dimension (e.g. a model's ffn: 0) has no tiles to time
        raise ConfigError(f"{name}: a GEMM of {m} x {k} x {n} has a dimension of 0; "
                          "check the model's sizes (ffn, expert_ffn, shared_ffn)", key="model")
    tile_m, tile_n, m_tiles, base, mma_m, mma_n, split = gemm_tiling(m, k, n, chip)
    tiles = base * split
    k_per = k / split
    rows = min(m, tile_m)
    w_total = k * n * weight_bytes
    w_hbm = w_total * (1.0 - weights_on_chip)
    stage_bytes = (tile_m + tile_n) * GEMM_K_TILE * ACT_BYTES
    main = Kernel(
        name=name, layer=layer, tiles=tiles,
        hbm_read=w_hbm / tiles,
        l2_read=(rows * k_per * ACT_BYTES + w_total * (m_tiles - 1) / tiles) / CLUSTER_MULTICAST
        + (w_total - w_hbm) / tiles,
        sram_read=(w_total - w_hbm) / tiles,
        l2_write=rows * tile_n * (ACC_BYTES if split > 1 else ACT_BYTES),
        tensor_flops=2.0 * mma_m * mma_n * k_per,
        smem_bytes=chip.smem_bytes_per_sm, inflight_bytes=(GEMM_STAGES - 1) * stage_bytes,
        start_trips=GEMM_START_TRIPS,
        address=weight_addr, data=data, compute=compute, balanced=tiles > chip.sms,
        channel_group=channel_group, writes=("splitk_partials",) if split > 1 else writes,
        dtype=dtype, decoder_elements=decoder_per_weight * k_per * tile_n,
        item=ir.Gemm(m, n, k, dtype, split_k=split),
    )
    if split == 1:
        return [main]
    partials = split * m * n * ACC_BYTES
    reduce = elementwise(f"{name}.splitk_reduce", layer, partials, m * n * ACT_BYTES, 0.25, chip,
                         component=compute if compute == Component.ROUTER else Component.ACTIVATION_IO,
                         reads=("splitk_partials",), writes=writes)
    return [main, reduce]


# cuBLAS's fallbacks for a strided-batched GEMM whose leading dimension is not a multiple of 8
# elements (16 bytes), as DeepSeek's reference MLA decode issues them over a cache of context + 1
# keys (CUPTI, validation/data/h200_general_kernels.csv.xz, the cal rows of DeepSeek-V2-Lite):
# magma_sgemmEx (CUDA-core FMAs) for the scores, a gemv-style gemmSN for probabilities x latent.
UNALIGNED_ELEMS = 8
SIMT_TILE_N = 64         # magma_sgemmEx: 64 keys a block, grid (keys / 64, 1, batch)
SIMT_TILE_M = 136        # FMA rows per key column that reproduce magma's measured rate with the 16 query
                         # heads (294 us at K = 512, 47 us at K = 64 over 32 x 4097 keys): an effective
                         # figure, fitted to those two kernels; magma's own tile is not known
SIMT_TRIPS = 6           # its K loop's dependent global loads exposed per wave
GEMV_SPLITS, GEMV_COLS = 8, 128    # gemmSN: grid (8, 4, batch): K in 8 pieces, N in 128-column strips
GEMV_INFLIGHT_BYTES = 600          # loads a gemmSN block keeps in flight (580 us at batch 4 x 32,769
                                   # keys with one block an SM, 180 us at 32 x 4,097)


def unaligned_batched_gemm(name: str, layer: int, batch: int, m: int, k: int, n: int, chip: ChipSizes, *,
                           b_addr: int, data: Component, writes: tuple[str, ...] = (),
                           reduce_over_k: bool = False) -> Kernel:
    """One of cuBLAS's fallback kernels for `batch` products [m, k] x [k, n] whose leading
    dimension is unaligned. `reduce_over_k` (probabilities x latent: K is the keys) runs the
    gemv-style gemmSN, latency-bound on a few loads in flight per block; otherwise (scores: N is
    the keys) magma's CUDA-core SGEMM. The [k, n] operand (the cache) streams from HBM once."""
    if reduce_over_k:
        tiles = batch * GEMV_SPLITS * math.ceil(n / GEMV_COLS)
        per_tile = k / GEMV_SPLITS * GEMV_COLS
        return Kernel(name=name, layer=layer, tiles=tiles, hbm_read=per_tile * ACT_BYTES,
                      vector_flops=2.0 * m * per_tile, inflight_bytes=GEMV_INFLIGHT_BYTES,
                      l2_write=m * GEMV_COLS * ACC_BYTES, address=b_addr, data=data,
                      compute=Component.ATTENTION_COMPUTE, writes=writes,
                      item=ir.Gemm(m, n, k, batch=batch, weight=False))
    tiles = batch * math.ceil(n / SIMT_TILE_N)
    return Kernel(name=name, layer=layer, tiles=tiles, hbm_read=SIMT_TILE_N * k * ACT_BYTES,
                  l2_read=m * k * ACT_BYTES, l2_write=m * SIMT_TILE_N * ACT_BYTES,
                  vector_flops=2.0 * SIMT_TILE_M * SIMT_TILE_N * k, round_trips=SIMT_TRIPS,
                  address=b_addr, data=data, compute=Component.ATTENTION_COMPUTE, writes=writes,
                  item=ir.Gemm(m, n, k, batch=batch, weight=False))


def elementwise(name: str, layer: int, read_bytes: float, write_bytes: float, ops_per_byte: float,
                chip: ChipSizes, *, weight_bytes: float = 0.0, weight_addr: int = 0,
                component: Component = Component.ACTIVATION_IO, round_trips: float = 1,
                vectorized: bool = True, input_trips: float = 1, reads: tuple[str, ...] = (),
                writes: tuple[str, ...] = (), atomic_bytes: float = 0.0,
                partial: tuple[str, ...] = (), row_overlap: float = 0.0, role: Role | None = None) -> Kernel:
    """A memory-streaming PyTorch kernel over L2-resident activations (adds, SiLU, casts).

    `round_trips` counts dependent memory accesses before the first useful load (2 for
    gather/scatter, which read their index first). `vectorized=False` is PyTorch's fallback for
    strided or broadcast operands: 512 elements a block of 128 threads, each element's offsets
    computed (TI_OPS_PER_ELEM integer ops, a dependent chain: TI_ALU_CHAIN) and loaded one by
    one. `atomic_bytes` is L2 time its atomic
    adds hold the slices for (L2_ATOMIC_BYTES an element), written as L2 traffic that lands no
    data (so it evicts nothing: hwsim.model.l2_residency).
    """
    int_ops = 0.0
    if vectorized:       # its grid covers every byte it moves, those it streams from HBM included
        tiles = max(1, math.ceil((read_bytes + weight_bytes + write_bytes) / ELEMENTWISE_TILE_BYTES))
    else:
        elements = write_bytes / ACT_BYTES
        tiles = max(1, math.ceil(elements / TI_BLOCK_ELEMS))
        int_ops = TI_OPS_PER_ELEM * elements / tiles
    strided = {} if vectorized else {"block_threads": TI_BLOCK_THREADS, "alu_chain": TI_ALU_CHAIN}
    return Kernel(
        name=name, layer=layer, tiles=tiles,
        hbm_read=weight_bytes / tiles, l2_read=read_bytes / tiles,
        l2_write=(write_bytes + atomic_bytes) / tiles, l2_atomic=atomic_bytes / tiles,
        vector_flops=ops_per_byte * read_bytes / tiles, int_ops=int_ops, address=weight_addr,
        data=component, compute=component, round_trips=round_trips,
        input_trips=input_trips, reads=reads, writes=writes, partial=partial, row_overlap=row_overlap,
        role=role, item=ir.Memory("elementwise", read_bytes + weight_bytes, write_bytes, vectorized), **strided,
    )


def _per_tile(read_bytes: float, write_bytes: float, tiles: int, *, from_hbm: bool, to_hbm: bool) -> dict:
    """A memory kernel's bytes per tile, its reads from HBM or L2 and its writes to one or the other."""
    return {"hbm_read": read_bytes / tiles if from_hbm else 0.0, "l2_read": 0.0 if from_hbm else read_bytes / tiles,
            "hbm_write": write_bytes / tiles if to_hbm else 0.0, "l2_write": 0.0 if to_hbm else write_bytes / tiles}


CAT_CTAS_PER_SM = 2       # PyTorch's CatArrayBatchedCopy (aten/src/ATen/native/cuda/Shape.cu, getCatGrid):
CAT_BLOCK_THREADS = 512   # 2 x SM-count blocks of 512 threads per input (an H100 trace's grid: [264, 2, 1])


def strided_cat(name: str, layer: int, read_bytes: float, write_bytes: float, chip: ChipSizes,
                *, from_hbm: bool, weight_addr: int = 0) -> Kernel:
    """PyTorch's non-vectorised cat (a DynamicCache appending one token along the sequence of
    [B, H, L, D]): a grid-stride loop over 2 x SMs blocks of 512 threads, each thread one element
    at a time: its offsets computed by a dependent chain of integer arithmetic (CatArrOffsetCalc,
    as TensorIterator's strided kernels: TI_OPS_PER_ELEM, TI_ALU_CHAIN, calibrated on the H200's
    strided element-wise kernels), then its load, then its store. With only two blocks an SM
    the chain is exposed, and a block keeps 512 elements in flight (Little's law), so the copy
    runs far below the HBM bandwidth: H100 traces show 0.68 TB/s read and written of 3.35."""
    tiles = CAT_CTAS_PER_SM * chip.sms
    return Kernel(
        name=name, layer=layer, tiles=tiles,
        **_per_tile(read_bytes, write_bytes, tiles, from_hbm=from_hbm, to_hbm=from_hbm), address=weight_addr,
        inflight_bytes=CAT_BLOCK_THREADS * ACT_BYTES, block_threads=CAT_BLOCK_THREADS,
        int_ops=TI_OPS_PER_ELEM * write_bytes / ACT_BYTES / tiles, alu_chain=TI_ALU_CHAIN,
        data=Component.ACTIVATION_IO, compute=Component.ACTIVATION_IO,
        item=ir.Memory("cat", read_bytes, write_bytes, vectorized=False),
    )


LOAD_VEC_BYTES = 16        # a thread's vector load (ATen's reduce_kernel reads 4 x fp32 or 8 x bf16)


def grid_limited(name: str, layer: int, read_bytes: float, write_bytes: float, ctas: int,
                 threads: int, chip: ChipSizes, *, from_hbm: bool, weight_addr: int = 0,
                 passes: float = 1) -> Kernel:
    """A reduction launched on fewer blocks than the chip has SMs (ATen's reduce_kernel sizes its
    grid by the output's rows: argmax over a 128k vocabulary at batch 1 is one block of 512
    threads): each block walks its share with one vector load in flight per thread, so the
    kernel is bound by memory latency over few blocks, not by bandwidth (Little's law). A block
    that makes `passes` dependent passes over its input (a radix select's digits) waits on a
    round trip for each."""
    return Kernel(
        name=name, layer=layer, tiles=ctas,
        **_per_tile(read_bytes, write_bytes, ctas, from_hbm=from_hbm, to_hbm=False),
        address=weight_addr, inflight_bytes=threads * LOAD_VEC_BYTES,
        block_threads=min(threads, 1024), data=Component.ACTIVATION_IO, compute=Component.ACTIVATION_IO,
        round_trips=passes, item=ir.Memory("reduction", read_bytes, write_bytes, ctas=ctas, threads=threads,
                                           passes=passes),
    )


def pointwise_blocks(name: str, layer: int, read_bytes: float, write_bytes: float, ctas: int,
                     threads: int, chip: ChipSizes, *, from_hbm: bool, to_hbm: bool = False,
                     weight_addr: int = 0) -> Kernel:
    """An Inductor (Triton) pointwise kernel on its traced grid: each program loads its whole
    share (XBLOCK elements) at once, then computes and stores it, so a block's bytes are one
    round trip and a small kernel is as many latencies as it has waves of blocks (Llama-3.1-8B's
    compiled KV expand at batch 1: 8,704 blocks of 256 threads, 8.7 us on the H200 for 10 MB),
    while a large one is bound by bandwidth. The share's round trip is its pipe's (no separate
    first trip)."""
    return Kernel(
        name=name, layer=layer, tiles=ctas,
        **_per_tile(read_bytes, write_bytes, ctas, from_hbm=from_hbm, to_hbm=to_hbm),
        address=weight_addr, inflight_bytes=max(read_bytes / ctas, 1.0), round_trips=0,
        block_threads=min(threads, 1024), vector_flops=read_bytes / ACT_BYTES / ctas,
        data=Component.ACTIVATION_IO, compute=Component.ACTIVATION_IO,
        item=ir.Memory("elementwise", read_bytes, write_bytes, ctas=ctas, threads=threads, share_in_flight=True),
    )


def rows_kernel(name: str, layer: int, rows: int, row_elems: int, elem_bytes: float,
                ops_per_elem: float, chip: ChipSizes, *, weight_bytes: float = 0.0,
                weight_addr: int = 0, component: Component = Component.ACTIVATION_IO,
                reads: tuple[str, ...] = (), writes: tuple[str, ...] = ()) -> Kernel:
    """One thread block per row (RMSNorm): the block walks its row in chunks, first to reduce,
    then to normalise, and each chunk waits on its own dependent round trips to memory. The
    blocks of the first wave all wait on the norm's weight from HBM; the blocks of later waves
    find it in L2, so of their round trips only one waits on HBM (8192 rows x 4096: 45 us on
    the H200, not the 92 us of every block fetching it from HBM:
    validation/data/h200_general_kernels.csv.xz)."""
    row_bytes = row_elems * elem_bytes
    chunks = ROW_ROUND_TRIPS * math.ceil(row_elems / ROW_CHUNK_ELEMS)
    first_wave = chip.sms * chip.cta_slots_per_sm
    from_hbm = weight_bytes * min(1.0, first_wave / rows)
    return Kernel(
        name=name, layer=layer, tiles=rows,
        hbm_read=from_hbm, l2_read=row_bytes + weight_bytes - from_hbm, l2_write=row_bytes,
        vector_flops=ops_per_elem * row_elems, address=weight_addr,
        miss_trips=1 if weight_bytes and rows > first_wave else -1,
        data=component, compute=component, round_trips=chunks, reads=reads, writes=writes,
        item=ir.Memory("reduction", rows * row_bytes + weight_bytes, rows * row_bytes),
    )


def kv_append(name: str, layer: int, batch: int, elements_per_token: int, kv_bytes_per_el: float,
              cache_addr: int, chip: ChipSizes) -> Kernel:
    """Write this step's new K (or V) rows into the cache: one small copy kernel. The source is
    a strided view of the QKV output and the destination a strided slice of the cache, so
    PyTorch runs its non-vectorised copy (elementwise_kernel<128, 4>, direct_copy)."""
    elements = batch * elements_per_token
    nbytes = elements * kv_bytes_per_el
    tiles = max(1, math.ceil(elements / TI_BLOCK_ELEMS))
    return Kernel(name=name, layer=layer, tiles=tiles, l2_read=nbytes / tiles,
                  hbm_write=nbytes / tiles, int_ops=TI_OPS_PER_ELEM * elements / tiles,
                  address=cache_addr, block_threads=TI_BLOCK_THREADS, alu_chain=TI_ALU_CHAIN,
                  data=Component.KV_WRITE, compute=Component.KV_WRITE,
                  item=ir.Memory("copy", nbytes, nbytes, vectorized=False, per_batch=True))


def fa2_split_block_n(head_dim: int) -> int:
    """KV rows per split block (set_params_splitkv)."""
    return 256 if head_dim <= 64 else (128 if head_dim <= 128 else 64)


def decode_attention_splits(batch: int, kv_heads: int, context: int, chip: ChipSizes,
                            head_dim: int = 128) -> int:
    """FlashAttention-2's num_splits_heuristic: split the context while it raises the share of
    the last wave that is full (over 2 blocks per SM), taking the fewest splits within 85% of
    the best; none once the (sequence, KV head) programs nearly fill the SMs."""
    return _fa2_splits(batch * kv_heads, FA2_SPLIT_WAVE_SMS * chip.sms,
                       math.ceil(context / fa2_split_block_n(head_dim)))


@functools.lru_cache(maxsize=4096)
def _fa2_splits(programs: int, slots: int, n_blocks: int) -> int:
    if programs >= 0.8 * slots:
        return 1
    most = min(FA2_MAX_SPLITS, slots, n_blocks)
    eligible = [s for s in range(1, most + 1)
                if s == 1 or math.ceil(n_blocks / s) != math.ceil(n_blocks / (s - 1))]
    eff = {s: (programs * s / slots) / math.ceil(programs * s / slots) for s in eligible}
    best = max(eff.values())
    return next(s for s in eligible if eff[s] >= 0.85 * best)


def cudnn_splits(batch: int, kv_heads: int, context: int) -> int:
    """cuDNN's decode split: about CUDNN_TARGET_BLOCKS blocks, at least one 64-key block each."""
    return max(1, min(CUDNN_TARGET_BLOCKS // (batch * kv_heads), math.ceil(context / 64)))


def decode_attention(name: str, layer: int, batch: int, heads: int, kv_heads: int, qk_dim: int,
                     v_dim: int, context: int, kv_bytes_per_token_head: float, cache_addr: int,
                     chip: ChipSizes, *, dequant_ops_per_token_head: float = 0.0,
                     decoder_elements_per_token_head: float = 0.0,
                     splits: int | None = None, block_m: int | None = None,
                     library: str = "flash", program=None,
                     lane_ops_per_token_head: float = 0.0,
                     segments: tuple[tuple[int, int], ...] = ()) -> list[Kernel]:
    """One query token per sequence attending over `context` cached tokens (GQA-packed).

    Each program owns one (sequence, KV head) pair and one slice of the context; the query
    heads sharing that KV head are packed as rows of the MMA. A compressed cache is read at
    its stored width and expanded in registers (ALU ops) or by a native decoder on the way
    in. A combine kernel merges the slices' partial softmax results when the context was split.
    `block_m` is the kernel's M tile (the rows its MMAs compute, padded or not); by default
    the library's: FlashAttention-2's 64 for the split-KV kernel and 128 for the unsplit one,
    cuDNN's 64 (`library="cudnn"`, which also splits and merges its own way).
    `program` (hwsim/model/fast_kv_occupancy.py Program: threads, registers, shared memory as
    compiled): the dequant ops are a latency-bound loop's chain (Kernel.chain_ops), overlapped by
    as many programs as the SM holds, the loop's lanes (`lane_ops_per_token_head`) its bound.
    `segments` (with a program): the (tokens, splits) of each storage segment one launch runs
    (calibration/fast_kv_attn.py); default one segment of the whole context.
    """
    cudnn = library == "cudnn"
    splits, block_m = _decode_tiling(cudnn, batch, kv_heads, context, chip, qk_dim, splits, block_m)
    group = heads // kv_heads
    chunk = context / splits
    rows = max(_roundup(group, MMA_M), block_m)
    block_n = fa2_split_block_n(qk_dim) if splits > 1 else FA2_BLOCK_N
    live = splits
    work = chunk                 # tokens the longest program iterates over
    if program is not None:
        work, live = fast_programs(segments or ((context, splits),), program.block)
        chunk = context / live
    tiles = batch * kv_heads * live
    sm = dict(int_ops=dequant_ops_per_token_head * chunk,
              smem_bytes=(block_n * (qk_dim + v_dim) + rows * qk_dim) * ACT_BYTES)
    if program is not None:      # as compiled; its dequant a chain that resident programs overlap
        sm = dict(block_threads=program.threads, regs_per_thread=program.regs, smem_bytes=program.smem,
                  chain_ops=dequant_ops_per_token_head * work * program.chain_scale,
                  int_ops=lane_ops_per_token_head * work)
    main = Kernel(
        name=name, layer=layer, tiles=tiles,
        hbm_read=chunk * kv_bytes_per_token_head,
        l2_read=group * qk_dim * ACT_BYTES,
        l2_write=group * (v_dim + 2) * ACC_BYTES,
        tensor_flops=2.0 * rows * work * (qk_dim + v_dim),
        vector_flops=SOFTMAX_OPS * group * work,
        decoder_elements=decoder_elements_per_token_head * chunk,
        address=cache_addr, data=Component.KV_READ, compute=Component.ATTENTION_COMPUTE,
        round_trips=ATTN_ROUND_TRIPS, mma_sync=True,
        item=ir.Attention("decode", batch, heads, kv_heads, qk_dim, 1, context, library),
        **sm,
    )
    if splits == 1:
        return [main]
    if program is not None:
        return [main, one_shot_combine(f"{name}.combine", layer, batch * heads, splits, v_dim)]
    trips = CUDNN_REDUCE_ROUND_TRIPS if cudnn else COMBINE_ROUND_TRIPS + COMBINE_TRIPS_PER_SPLIT * splits
    return [main, split_combine(f"{name}.combine", layer, batch * heads, splits, v_dim, chip, trips)]


def _decode_tiling(cudnn: bool, batch: int, kv_heads: int, context: int, chip: ChipSizes, qk_dim: int,
                   splits: int | None, block_m: int | None) -> tuple[int, int]:
    """(splits, M tile) of a decode attention where the caller gives neither: the library's own
    (cuDNN's split and 64 rows; FlashAttention-2's heuristic, 64 rows split and 128 unsplit)."""
    if cudnn:
        splits = splits or cudnn_splits(batch, kv_heads, context)
        block_m = block_m or CUDNN_BLOCK_M
    splits = splits or decode_attention_splits(batch, kv_heads, context, chip, qk_dim)
    if block_m is None:
        block_m = FA2_SPLIT_BLOCK_M if splits > 1 else FA2_BLOCK_M
    return splits, block_m


def split_combine(name: str, layer: int, query_rows: int, splits: int, v_dim: int, chip: ChipSizes,
                  trips: float) -> Kernel:
    """The kernel that merges a split-KV attention's partial softmax results, an element-wise
    pass over every query row's splits (FlashAttention-2's combine, cuDNN's lean reduction:
    their dependent `trips`)."""
    partial = query_rows * splits * (v_dim + 2) * ACC_BYTES
    return elementwise(name, layer, partial, query_rows * v_dim * ACT_BYTES, SOFTMAX_OPS / ACC_BYTES, chip,
                       component=Component.ATTENTION_COMPUTE, round_trips=trips)


def fast_programs(segments: tuple[tuple[int, int], ...], block: int) -> tuple[int, int]:
    """(tokens a program runs, programs a row) of the fast KV kernel's launch, in the wave model's
    equal tiles: the largest segment's splits. Each split takes whole token blocks
    (fast_kv_attn._segment: cdiv(cdiv(L, n), BLOCK) * BLOCK), so a segment's last splits may be
    empty (they end at once); the other segments' programs (a sink's few tokens, kivi-2's
    128-token window, adaptive-2's outliers) are short and run in the slots the long ones leave,
    adding their bytes to the tiles, not rounds."""
    tokens, n = max(segments)
    work = math.ceil(math.ceil(tokens / n) / block) * block
    return work, math.ceil(tokens / work)


def one_shot_combine(name: str, layer: int, query_rows: int, splits: int, v_dim: int) -> Kernel:
    """The fast KV kernel's combine (calibration/fast_kv_attn.py `_combine`): one program a query
    head loads every split's maximum, sum and accumulator at once ([splits] and [splits, D] tiles),
    so it has the fixed chain of a split-KV combine (COMBINE_ROUND_TRIPS) and no per-split loop
    (FlashAttention-2's, COMBINE_TRIPS_PER_SPLIT)."""
    partial = splits * (v_dim + 2) * ACC_BYTES
    return Kernel(name=name, layer=layer, tiles=query_rows, l2_read=partial, l2_write=v_dim * ACT_BYTES,
                  vector_flops=SOFTMAX_OPS * partial / ACC_BYTES, block_threads=FAST_COMBINE_THREADS,
                  data=Component.ATTENTION_COMPUTE, compute=Component.ATTENTION_COMPUTE,
                  round_trips=COMBINE_ROUND_TRIPS)


EW_OPS_PER_BYTE = 0.25    # fp32 ops per byte of a generic element-wise kernel (an add: 1 op per bf16
                          # element read twice); the compute is never what limits these
L2_RESIDENT_SHARE = 0.5   # a tensor up to half the L2 is read from (written into) L2, as the kernel
                          # before it left it; a larger one streams from (to) HBM
INDEX_TRIPS = 2           # a gather or scatter loads its index before the data it points at


def in_hbm(chip: ChipSizes, nbytes: float) -> bool:
    """Whether a tensor of this size streams from (to) HBM rather than staying in L2."""
    return nbytes > chip.l2_bytes * L2_RESIDENT_SHARE


def streamed_copy(name: str, layer: int, read: float, write: float, ops_per_byte: float, chip: ChipSizes, *,
                  from_cache: bool = False, addr: int = 0, component: Component = Component.ACTIVATION_IO,
                  vectorized: bool = True, trips: float = 1, input_trips: float = 1) -> Kernel:
    """An element-wise kernel of `read` bytes into `write` bytes whose input comes from HBM when it
    is a cache (`from_cache`) or larger than half the L2, and whose output goes to HBM when it is
    larger than that (the traced kernels' rule, hwsim/ktrace/lower.py, and the HF engine's
    attention copies, hwsim/model/paged_sdpa.py)."""
    from_hbm = read if from_cache or in_hbm(chip, read) else 0.0
    k = elementwise(name, layer, read - from_hbm, write, ops_per_byte, chip, weight_bytes=from_hbm,
                    weight_addr=addr, component=component, round_trips=trips, vectorized=vectorized,
                    input_trips=input_trips)
    return copy_kernel(k, hbm_write=k.l2_write, l2_write=0.0) if in_hbm(chip, write) else k


def unfused_dequant(name: str, layer: int, packed_bytes: float, elements: float, ops_per_element: float,
                    cache_addr: int, chip: ChipSizes) -> Kernel:
    """Expand a compressed cache into a bf16 copy in HBM before attention (extra traffic)."""
    tiles = max(1, math.ceil(elements * ACT_BYTES / ELEMENTWISE_TILE_BYTES))
    return Kernel(name=name, layer=layer, tiles=tiles, hbm_read=packed_bytes / tiles,
                  hbm_write=elements * ACT_BYTES / tiles, int_ops=ops_per_element * elements / tiles,
                  address=cache_addr, data=Component.DEQUANT, compute=Component.DEQUANT,
                  item=ir.Memory("elementwise", packed_bytes, elements * ACT_BYTES))


@functools.lru_cache(maxsize=256)     # the schedule asks once a layer; a few shapes a run
def causal_busiest_tiles(q_blocks: int, heads: int, sms: int) -> float:
    """Tiles' worth of work (in average tiles) the busiest SM runs when a causal grid's tiles are
    dispatched in launch order (query block fastest, then head) to whichever SM frees first;
    query block i iterates over i + 1 key blocks, so the last blocks of the last heads run long
    while other SMs have finished (FlashAttention-2's grid; calibration/data/h200_kernel_traces.jsonl)."""
    loads = [0.0] * min(sms, q_blocks * heads)
    for _ in range(heads):
        for block in range(q_blocks):
            heapq.heapreplace(loads, loads[0] + block + 1)
    return max(loads) / ((q_blocks + 1) / 2)


def prefill_attention(name: str, layer: int, tokens: int, heads: int, kv_heads: int, qk_dim: int,
                      v_dim: int, chip: ChipSizes) -> Kernel:
    """Causal FlashAttention over a prompt: K/V of the prompt stay in L2, half the scores are
    masked, and the unequal tiles leave the busiest SM with more than its share."""
    q_blocks = math.ceil(tokens / ATTN_BLOCK_M)
    tiles = q_blocks * heads
    avg_keys = (tokens + ATTN_BLOCK_M) / 2        # causal: block i sees i+1 key blocks
    kv_row = (qk_dim + v_dim) * ACT_BYTES
    return Kernel(
        name=name, layer=layer, tiles=tiles, busiest_tiles=causal_busiest_tiles(q_blocks, heads, chip.sms),
        l2_read=ATTN_BLOCK_M * qk_dim * ACT_BYTES + avg_keys * kv_row,
        l2_write=ATTN_BLOCK_M * v_dim * ACT_BYTES,
        tensor_flops=2.0 * ATTN_BLOCK_M * avg_keys * (qk_dim + v_dim),
        vector_flops=SOFTMAX_OPS * ATTN_BLOCK_M * avg_keys,
        smem_bytes=(ATTN_BLOCK_M * qk_dim + 2 * ATTN_BLOCK_N * (qk_dim + v_dim)) * ACT_BYTES // 2,
        round_trips=ATTN_ROUND_TRIPS,
        data=Component.ATTENTION_COMPUTE, compute=Component.ATTENTION_COMPUTE, mma_sync=True,
        item=ir.Attention("prefill", 1, heads, kv_heads, qk_dim, tokens, tokens),
    )
