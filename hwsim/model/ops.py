"""Kernel builders: how one operation splits into thread-block tiles with bytes and flops.

The tiling rules mirror the libraries the measured schedule calls (cuBLAS GEMMs, FlashAttention
split-KV decode, PyTorch element-wise kernels); their chip-specific knobs (GEMM tile sizes,
split-K limit) come from the hardware profile, never from the model.
"""

from __future__ import annotations

import math

from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model.kernel import Kernel

ACT_BYTES = 2            # bf16 activations
ACC_BYTES = 4            # fp32 partial sums
MMA_M = 16               # smallest M of a tensor-core MMA (mma.sync m16n8k16): rows are padded to it
GEMM_K_TILE = 64         # K depth of one pipeline stage
GEMM_STAGES = 7          # TMA pipeline stages: sm90 kernels size stages to fill shared memory
                         # (CUTLASS StageCountAutoCarveout), leaving one GEMM block per SM
ELEMENTWISE_TILE_BYTES = 16 * 1024   # bytes one element-wise thread block handles (4 warps x 16 B x 256)
ATTN_BLOCK_N = 128       # KV rows per FlashAttention block
ATTN_BLOCK_M = 128       # query rows per FlashAttention prefill tile
CLUSTER_MULTICAST = 2    # Hopper GEMMs load shared operand tiles once per 2-CTA cluster (TMA multicast)
SOFTMAX_OPS = 5          # max, subtract, exp, sum, rescale per score


def _roundup(x: int, m: int) -> int:
    return -(-x // m) * m


def gemm(name: str, layer: int, m: int, k: int, n: int, chip: ChipSpec, *, weight_addr: int,
         weight_bytes: float, data: Component, compute: Component = Component.GEMM_COMPUTE) -> Kernel:
    """y[m, n] = x[m, k] @ W[n, k]^T with W streamed from HBM once and x re-read from L2.

    Tile choice follows the library's habit: the largest tile (2x the profile's in each
    dimension) when that still gives a full wave of tiles; a taller tile rather than two
    M tiles that would re-read the weights; else the profile's base tile. Multi-wave grids are
    scheduled stream-K style (`balanced`): the last partial wave is spread over all SMs.
    """
    tile_m, tile_n = chip.gemm_tile_m, chip.gemm_tile_n
    if math.ceil(m / (2 * tile_m)) * math.ceil(n / (2 * tile_n)) >= chip.sms:
        tile_m, tile_n = 2 * tile_m, 2 * tile_n
    elif tile_m < m <= 2 * tile_m:
        tile_m = 2 * tile_m
    m_tiles, n_tiles = math.ceil(m / tile_m), math.ceil(n / tile_n)
    base = m_tiles * n_tiles
    split = 1
    if base < chip.sms:   # too few tiles to fill the chip: split K, as cuBLAS's split-K kernels do
        split = max(1, min(chip.sms // base, k // chip.gemm_min_k_per_split))
    tiles = base * split
    k_per = k / split
    rows = min(m, tile_m)
    w_total = k * n * weight_bytes
    return Kernel(
        name=name, layer=layer, tiles=tiles,
        hbm_read=w_total / tiles,
        l2_read=(rows * k_per * ACT_BYTES + w_total * (m_tiles - 1) / tiles) / CLUSTER_MULTICAST,
        l2_write=rows * tile_n * (ACC_BYTES if split > 1 else ACT_BYTES),
        tensor_flops=2.0 * min(_roundup(rows, MMA_M), tile_m) * tile_n * k_per,
        smem_bytes=GEMM_STAGES * (tile_m + tile_n) * GEMM_K_TILE * ACT_BYTES,
        address=weight_addr, data=data, compute=compute, balanced=tiles > chip.sms,
    )


def elementwise(name: str, layer: int, read_bytes: float, write_bytes: float, ops_per_byte: float,
                chip: ChipSpec, *, weight_bytes: float = 0.0, weight_addr: int = 0,
                component: Component = Component.ACTIVATION_IO) -> Kernel:
    """A memory-streaming PyTorch kernel over L2-resident activations (norms, adds, SiLU, gather)."""
    tiles = max(1, math.ceil((read_bytes + write_bytes) / ELEMENTWISE_TILE_BYTES))
    return Kernel(
        name=name, layer=layer, tiles=tiles,
        hbm_read=weight_bytes / tiles, l2_read=read_bytes / tiles, l2_write=write_bytes / tiles,
        vector_flops=ops_per_byte * read_bytes / tiles, address=weight_addr,
        data=component, compute=component,
    )


def rows_kernel(name: str, layer: int, rows: int, row_bytes: float, ops_per_byte: float,
                chip: ChipSpec, *, weight_bytes: float = 0.0, weight_addr: int = 0,
                component: Component = Component.ACTIVATION_IO) -> Kernel:
    """A kernel with one thread block per row (RMSNorm, softmax): reads and writes each row."""
    return Kernel(
        name=name, layer=layer, tiles=rows,
        hbm_read=weight_bytes, l2_read=row_bytes, l2_write=row_bytes,
        vector_flops=ops_per_byte * row_bytes, address=weight_addr,
        data=component, compute=component,
    )


def kv_append(name: str, layer: int, batch: int, elements_per_token: int, kv_bytes_per_el: float,
              cache_addr: int, chip: ChipSpec) -> Kernel:
    """Write this step's new K (or V) rows into the cache: one small copy kernel."""
    nbytes = batch * elements_per_token * kv_bytes_per_el
    tiles = max(1, math.ceil(nbytes / ELEMENTWISE_TILE_BYTES))
    return Kernel(name=name, layer=layer, tiles=tiles, l2_read=nbytes / tiles,
                  hbm_write=nbytes / tiles, address=cache_addr,
                  data=Component.KV_WRITE, compute=Component.KV_WRITE)


def decode_attention_splits(batch: int, kv_heads: int, context: int, chip: ChipSpec) -> int:
    """FlashAttention split-KV heuristic: split the context until the grid covers the SMs."""
    programs = batch * kv_heads
    if programs >= 0.8 * chip.sms:
        return 1
    blocks = math.ceil(context / ATTN_BLOCK_N)
    return max(1, min(blocks, round(chip.sms / programs), 128))


def decode_attention(name: str, layer: int, batch: int, heads: int, kv_heads: int, qk_dim: int,
                     v_dim: int, context: int, kv_bytes_per_token_head: float, cache_addr: int,
                     chip: ChipSpec) -> list[Kernel]:
    """One query token per sequence attending over `context` cached tokens (GQA-packed).

    Each program owns one (sequence, KV head) pair and one slice of the context; the query
    heads sharing that KV head are packed as rows of the MMA. A combine kernel merges the
    slices' partial softmax results when the context was split.
    """
    splits = decode_attention_splits(batch, kv_heads, context, chip)
    group = heads // kv_heads
    chunk = context / splits
    rows = _roundup(group, MMA_M)
    tiles = batch * kv_heads * splits
    main = Kernel(
        name=name, layer=layer, tiles=tiles,
        hbm_read=chunk * kv_bytes_per_token_head,
        l2_read=group * qk_dim * ACT_BYTES,
        l2_write=group * (v_dim + 2) * ACC_BYTES,
        tensor_flops=2.0 * rows * chunk * (qk_dim + v_dim),
        vector_flops=SOFTMAX_OPS * group * chunk,
        smem_bytes=(ATTN_BLOCK_N * (qk_dim + v_dim) + rows * qk_dim) * ACT_BYTES,
        address=cache_addr, data=Component.KV_READ, compute=Component.ATTENTION_COMPUTE,
    )
    if splits == 1:
        return [main]
    partial = batch * heads * splits * (v_dim + 2) * ACC_BYTES
    combine = rows_kernel(f"{name}.combine", layer, batch * heads, partial / (batch * heads),
                          SOFTMAX_OPS / ACC_BYTES, chip)
    return [main, combine]


def prefill_attention(name: str, layer: int, tokens: int, heads: int, kv_heads: int, qk_dim: int,
                      v_dim: int, chip: ChipSpec) -> Kernel:
    """Causal FlashAttention over a prompt: K/V of the prompt stay in L2, half the scores are masked."""
    q_blocks = math.ceil(tokens / ATTN_BLOCK_M)
    tiles = q_blocks * heads
    avg_keys = (tokens + ATTN_BLOCK_M) / 2        # causal: block i sees i+1 key blocks
    kv_row = (qk_dim + v_dim) * ACT_BYTES
    return Kernel(
        name=name, layer=layer, tiles=tiles,
        l2_read=ATTN_BLOCK_M * qk_dim * ACT_BYTES + avg_keys * kv_row,
        l2_write=ATTN_BLOCK_M * v_dim * ACT_BYTES,
        tensor_flops=2.0 * ATTN_BLOCK_M * avg_keys * (qk_dim + v_dim),
        vector_flops=SOFTMAX_OPS * ATTN_BLOCK_M * avg_keys,
        smem_bytes=(ATTN_BLOCK_M * qk_dim + 2 * ATTN_BLOCK_N * (qk_dim + v_dim)) * ACT_BYTES // 2,
        data=Component.ATTENTION_COMPUTE, compute=Component.ATTENTION_COMPUTE,
    )
