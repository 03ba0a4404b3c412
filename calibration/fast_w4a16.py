"""A Marlin-class W4A16 GEMM for decode batches of 1-64 rows (Triton; issue 31, item 2).

y[m, n] = sum_k x[m, k] * W[n, k], W stored as 4-bit codes c with one fp16 scale s and zero z
per group of GROUP = 128 weights along k (w = c * s + z: hwsim's int4, group 128, asymmetric).

Against PyTorch's tinygemm (torch._weight_int4pack_mm, the kernel hwsim's software path is
fitted on) and the naive Triton W4A16 of calibration/moe_impls.py:
- Weights are the M side of the dot ("swap AB", as Marlin/Machete do at small batch): a tile
  of BN = 64 or 128 output columns fills a wgmma M block, and the batch (padded to 16) is N.
  No 16-row tile is padded to hold one token's row.
- Codes are pre-shuffled offline into the order the tiles consume them: tile (n-block, k-block)
  is one contiguous [BN, BK/4] block of int16 containers, and container j holds k = j + i*BK/4
  at bit offset 4i, so shift i yields slice i, a contiguous [BN, BK/4] tile (no relayout).
- Int -> half by the magic number ((c | 0x6400) as fp16 is 1024 + c; one fp16 subtract),
  fast_kv_attn._codes_to_half: portable Triton, or (asm=True, GPU only) inline PTX on packed pairs.
- The group's scale and zero are applied once per output, not per weight: with BK = GROUP,
  acc += s * (codes . x) + z * sum(x), one FMA per output per group.
- Split-K over programs when the n-blocks alone cannot fill the SMs; partials summed after.
Activations are fp16 (the magic number is fp16's); accumulation is fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import interpreter_compat

interpreter_compat.patch()        # numpy >= 2.4 under TRITON_INTERPRET=1

from fast_kv_attn import _codes_to_half     # the same int16-container dequant as 4-bit KV

GROUP = 128
SLICES = 4                 # codes per int16 container = k slices per tile


@triton.jit
def _w4a16(x_ptr, w_ptr, s_ptr, z_ptr, out_ptr, M, N, K, tiles_per_split,
           BN: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, SPLIT_K: tl.constexpr,
           ASM: tl.constexpr):
    """Grid (N / BN, SPLIT_K): program (pn, sk) computes y^T[pn*BN:(pn+1)*BN, :M] over its
    K tiles; with SPLIT_K > 1 it writes an fp32 partial to out[sk]."""
    pn = tl.program_id(0)
    sk = tl.program_id(1)
    SW: tl.constexpr = BK // 4
    KT = K // BK
    offs_n = pn * BN + tl.arange(0, BN)
    offs_m = tl.arange(0, BM)
    offs_c = tl.arange(0, SW)
    mm = offs_m[:, None] < M
    acc = tl.zeros([BN, BM], tl.float32)
    t0 = sk * tiles_per_split
    t1 = tl.minimum(t0 + tiles_per_split, KT)
    for kt in range(t0, t1):
        tile = w_ptr + ((pn * KT + kt) * BN + tl.arange(0, BN)[:, None]) * SW + offs_c[None, :]
        w = tl.load(tile)
        xk = x_ptr + offs_m[:, None] * K + kt * BK + offs_c[None, :]        # x slices [BM, SW], rows contiguous
        x0 = tl.load(xk + 0 * SW, mask=mm, other=0.0)
        x1 = tl.load(xk + 1 * SW, mask=mm, other=0.0)
        x2 = tl.load(xk + 2 * SW, mask=mm, other=0.0)
        x3 = tl.load(xk + 3 * SW, mask=mm, other=0.0)
        part = tl.dot(_codes_to_half(w, 0, 4, ASM), tl.trans(x0))
        part += tl.dot(_codes_to_half(w, 1, 4, ASM), tl.trans(x1))
        part += tl.dot(_codes_to_half(w, 2, 4, ASM), tl.trans(x2))
        part += tl.dot(_codes_to_half(w, 3, 4, ASM), tl.trans(x3))
        xsum = tl.sum(x0.to(tl.float32) + x1.to(tl.float32) + x2.to(tl.float32) + x3.to(tl.float32), 1)
        g = kt                                   # BK == GROUP: one scale row per tile
        s = tl.load(s_ptr + g * N + offs_n).to(tl.float32)
        z = tl.load(z_ptr + g * N + offs_n).to(tl.float32)
        acc += part * s[:, None] + z[:, None] * xsum[None, :]
    dst = offs_m[None, :] * N + offs_n[:, None]
    rows_ok = offs_m[None, :] < M
    if SPLIT_K == 1:
        tl.store(out_ptr + dst, acc.to(tl.float16), mask=rows_ok)
    else:
        tl.store(out_ptr + sk * M * N + dst, acc, mask=rows_ok)


def quantize(w: torch.Tensor):
    """W [N, K] float -> (codes [N, K] int64 in 0..15, scale and zero [K/GROUP, N] fp16),
    asymmetric min/max per group of GROUP along k, scale and zero rounded to fp16 first."""
    n, k = w.shape
    g = w.float().view(n, k // GROUP, GROUP)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp_min(1e-4).half()
    zero = lo.half()
    codes = ((g - zero.float()) / scale.float()).round().clamp(0, 15).to(torch.int64)
    return codes.view(n, k), scale.view(n, -1).t().contiguous(), zero.view(n, -1).t().contiguous()


def pack(codes: torch.Tensor, bn: int, bk: int = GROUP) -> torch.Tensor:
    """Codes [N, K] -> int16 containers in tile order [N/bn, K/bk, bn, bk/4] (module doc)."""
    n, k = codes.shape
    sw = bk // SLICES
    tiles = codes.view(n // bn, bn, k // bk, bk).permute(0, 2, 1, 3)        # [nb, kb, bn, bk]
    word = torch.zeros(*tiles.shape[:3], sw, dtype=torch.int64, device=codes.device)
    for i in range(SLICES):
        word |= tiles[..., i * sw:(i + 1) * sw] << (4 * i)
    word = torch.where(word >= 1 << 15, word - (1 << 16), word)
    return word.to(torch.int16).contiguous()


def dequantize(codes, scale, zero) -> torch.Tensor:
    """The float W [N, K] that codes, scale and zero stand for."""
    n, k = codes.shape
    group = torch.arange(k, device=codes.device) // GROUP
    return codes.float() * scale.float().t()[:, group] + zero.float().t()[:, group]


def default_split_k(n: int, k: int, bn: int, sms: int = 132, waves: int = 2) -> int:
    """Fewest K splits that give `waves` programs per SM, each at least one K tile."""
    blocks = n // bn
    k_tiles = k // GROUP
    return max(1, min(k_tiles, triton.cdiv(waves * sms, blocks)))


class W4A16Linear:
    """y = x @ W^T for x [M, K] fp16 (M <= 64) with W packed for this kernel's BN."""

    def __init__(self, w: torch.Tensor, max_rows: int, bn: int = 64, warps: int = 4, stages: int = 3,
                 split_k: int | None = None, asm: bool = False):
        n, k = w.shape
        if n % bn or k % GROUP or max_rows > 64:
            raise ValueError(f"N {n} must divide by {bn}, K {k} by {GROUP}; rows <= 64, got {max_rows}")
        self.n, self.k, self.bn, self.warps, self.stages = n, k, bn, warps, stages
        self.asm = asm          # the inline-PTX dequant (GPU only)
        self.codes, self.scale, self.zero = quantize(w)
        self.packed = pack(self.codes, bn)
        self.split_k = split_k or default_split_k(n, k, bn)
        self.tiles_per_split = triton.cdiv(k // GROUP, self.split_k)
        self.split_k = triton.cdiv(k // GROUP, self.tiles_per_split)    # no empty splits
        self.bm = max(16, triton.next_power_of_2(max_rows))
        dev = w.device
        self.partial = torch.empty(self.split_k, max_rows, n, dtype=torch.float32, device=dev)
        self.out = torch.empty(max_rows, n, dtype=torch.float16, device=dev)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        m = x.shape[0]
        dst = self.out if self.split_k == 1 else self.partial
        _w4a16[(self.n // self.bn, self.split_k)](
            x, self.packed, self.scale, self.zero, dst, m, self.n, self.k, self.tiles_per_split,
            BN=self.bn, BM=self.bm, BK=GROUP, SPLIT_K=self.split_k, ASM=self.asm,
            num_warps=self.warps, num_stages=self.stages)
        if self.split_k == 1:
            return self.out[:m]
        return self.partial.view(-1)[:self.split_k * m * self.n].view(self.split_k, m, self.n).sum(0).half()

    def replica(self) -> "W4A16Linear":
        """The same layer over its own copy of the weights (to rotate copies past the L2)."""
        twin = object.__new__(W4A16Linear)
        twin.__dict__.update(self.__dict__)
        twin.packed, twin.scale, twin.zero = (t.clone() for t in (self.packed, self.scale, self.zero))
        return twin

    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.packed, self.scale, self.zero))

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Pure torch in fp32 over the dequantized weights."""
        return x.float() @ dequantize(self.codes, self.scale, self.zero).t()
