"""Fast fused split-KV decode attention over a low-bit KV cache (Triton; issue 31, item 1).

What makes it fast where shared/calibration/qkv_attn.py (the naive kernel hwsim is calibrated
on) is slow, each against that kernel:
- Codes are packed offline in the order the tiles consume them: a container (uint8 at 2 bits,
  int16 at 4, int32 at 8) holds the codes of head-dim columns j, j + D/4, j + D/2, j + 3D/4,
  so shifting by i * BITS yields slice i, a contiguous [BLOCK, D/4] tile. No reshape, no
  broadcast shift, no layout conversion between the load and the dot.
- Int -> half by the magic number: (code | 0x6400) bitcast to fp16 is 1024 + code exactly, and
  one fp16 subtract leaves the code (LOP3 + HADD2; no I2F, no F2F, no fp32 round trip).
- Scales and zeros never touch the elements. K is grouped per channel over GK tokens
  (KIVI/QServe): q * scale is formed once per token block and the zero term q . zero is one
  [GP] vector per block. V is grouped per token over GV channels: the scale is folded into the
  softmax weights p, the zero term is p @ zero. The dot runs on the integer codes themselves.
- tl.dot over the GQA query group, its rows padded to GP = 16 (the mma.sync M floor; the
  measurement script varies the real rows 1-16 to measure that floor).
- Split-KV over segments of the mixed-class layout in ONE launch: tokens of each storage width
  (sinks/outliers at 8 or 4 bits, routine at 2 or 4, a recent window at 16) are a separate
  segment (attention does not care about token order; outliers' positions matter only to the
  cache's writer), each with its own splits; a combine kernel merges all partials.

Layout of one segment at BITS < 16, per (sequence, KV head) row bh of B * KVH, its Ls tokens
stored in S = Ls rounded up to ROW_PAD rows (`stride`: tiles load unmasked; the padding's
scores are masked):
  kc, vc   [BH, S, D/4]         containers, codes as above
  ks, kz   [BH, S/GK, D]        fp16 K scale and zero per channel and GK-token group
  vs, vz   [BH, S, D/GV]        fp16 V scale and zero per token and GV-channel group
At BITS = 16: kc, vc are fp16 [BH, S, D] and the scales are unused. An inline-PTX variant of
the dequant (asm=True: Marlin's SHF + LOP3 + HSUB2 on packed pairs) runs only on a GPU.
Codes cover 2, 4 and 8 bits; 3-, 1.5- and 1-bit layouts are not implemented.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

import interpreter_compat

# class_widths is re-exported for callers that build a cache from a layout
from fast_grid import class_widths, plan_splits, segment_bytes, segment_widths  # noqa: F401

SLICES = 4                       # codes per container = head-dim slices per tile
ROW_PAD = 128                    # stored rows per (sequence, KV head): a multiple of the largest block
CONTAINER = {2: torch.uint8, 4: torch.int16, 8: torch.int32}
LOG2E = 1.4426950408889634
interpreter_compat.patch()        # numpy >= 2.4 under TRITON_INTERPRET=1


# --------------------------------------------------------------------------- kernel
@triton.jit
def _codes_to_half(w, I: tl.constexpr, BITS: tl.constexpr, ASM: tl.constexpr = False):
    """Slice I of a tile of containers -> the integer codes as exact fp16 (magic number 0x6400).
    ASM (GPU only; the interpreter has no inline PTX): Marlin's sequence on packed pairs."""
    if ASM:
        h = _codes_to_half_asm(w, I, BITS)
    else:
        if BITS == 2:
            w = w.to(tl.int16)                       # uint8 -> 16 bits, zero-extended (PRMT)
        c = ((w >> (I * BITS)) & ((1 << BITS) - 1)) | 0x6400   # SHF + LOP3
        # int32 container (8 bits): keep the low half; int16: a no-op (or the truncation of a
        # promotion to int32, should a Triton version type the literals so)
        c = c.to(tl.int16)
        h = c.to(tl.float16, bitcast=True) - 1024.0          # HADD2: 1024 + code - 1024
    return h


# Inline PTX per (bits, slice), Marlin's sequence on packed pairs: shift the containers, mask two
# codes into the mantissas of 0x6400|0x6400 with one LOP3 (2 bits: spread four bytes over two
# registers with PRMT first; 8 bits: gather byte I of two containers with one PRMT), then one
# HSUB2 of 1024. Literal strings per branch: Triton takes no computed asm text.
@triton.jit
def _codes_to_half_asm(w, I: tl.constexpr, BITS: tl.constexpr):
    if BITS == 4 and I == 0:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, m; shr.b32 t, $1, 0; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xea; "
                "mov.b32 m, 0x64006400; sub.f16x2 $0, t, m;}",
                "=r,r", [w], dtype=tl.float16, is_pure=True, pack=2)
    elif BITS == 4 and I == 1:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, m; shr.b32 t, $1, 4; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xea; "
                "mov.b32 m, 0x64006400; sub.f16x2 $0, t, m;}",
                "=r,r", [w], dtype=tl.float16, is_pure=True, pack=2)
    elif BITS == 4 and I == 2:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, m; shr.b32 t, $1, 8; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xea; "
                "mov.b32 m, 0x64006400; sub.f16x2 $0, t, m;}",
                "=r,r", [w], dtype=tl.float16, is_pure=True, pack=2)
    elif BITS == 4 and I == 3:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, m; shr.b32 t, $1, 12; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xea; "
                "mov.b32 m, 0x64006400; sub.f16x2 $0, t, m;}",
                "=r,r", [w], dtype=tl.float16, is_pure=True, pack=2)
    elif BITS == 2 and I == 0:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, lo, hi, z, m; mov.b32 z, 0; mov.b32 m, 0x64006400; shr.b32 t, $2, 0; "
                "prmt.b32 lo, t, z, 0x4140; prmt.b32 hi, t, z, 0x4342; "
                "lop3.b32 lo, lo, 0x00030003, 0x64006400, 0xea; lop3.b32 hi, hi, 0x00030003, 0x64006400, 0xea; "
                "sub.f16x2 $0, lo, m; sub.f16x2 $1, hi, m;}",
                "=r,=r,r", [w], dtype=tl.float16, is_pure=True, pack=4)
    elif BITS == 2 and I == 1:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, lo, hi, z, m; mov.b32 z, 0; mov.b32 m, 0x64006400; shr.b32 t, $2, 2; "
                "prmt.b32 lo, t, z, 0x4140; prmt.b32 hi, t, z, 0x4342; "
                "lop3.b32 lo, lo, 0x00030003, 0x64006400, 0xea; lop3.b32 hi, hi, 0x00030003, 0x64006400, 0xea; "
                "sub.f16x2 $0, lo, m; sub.f16x2 $1, hi, m;}",
                "=r,=r,r", [w], dtype=tl.float16, is_pure=True, pack=4)
    elif BITS == 2 and I == 2:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, lo, hi, z, m; mov.b32 z, 0; mov.b32 m, 0x64006400; shr.b32 t, $2, 4; "
                "prmt.b32 lo, t, z, 0x4140; prmt.b32 hi, t, z, 0x4342; "
                "lop3.b32 lo, lo, 0x00030003, 0x64006400, 0xea; lop3.b32 hi, hi, 0x00030003, 0x64006400, 0xea; "
                "sub.f16x2 $0, lo, m; sub.f16x2 $1, hi, m;}",
                "=r,=r,r", [w], dtype=tl.float16, is_pure=True, pack=4)
    elif BITS == 2 and I == 3:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, lo, hi, z, m; mov.b32 z, 0; mov.b32 m, 0x64006400; shr.b32 t, $2, 6; "
                "prmt.b32 lo, t, z, 0x4140; prmt.b32 hi, t, z, 0x4342; "
                "lop3.b32 lo, lo, 0x00030003, 0x64006400, 0xea; lop3.b32 hi, hi, 0x00030003, 0x64006400, 0xea; "
                "sub.f16x2 $0, lo, m; sub.f16x2 $1, hi, m;}",
                "=r,=r,r", [w], dtype=tl.float16, is_pure=True, pack=4)
    elif BITS == 8 and I == 0:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, m; prmt.b32 t, $1, $2, 0x4400; lop3.b32 t, t, 0x00FF00FF, 0x64006400, 0xea; "
                "mov.b32 m, 0x64006400; sub.f16x2 $0, t, m;}",
                "=r,r,r", [w], dtype=tl.float16, is_pure=True, pack=2)
    elif BITS == 8 and I == 1:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, m; prmt.b32 t, $1, $2, 0x5511; lop3.b32 t, t, 0x00FF00FF, 0x64006400, 0xea; "
                "mov.b32 m, 0x64006400; sub.f16x2 $0, t, m;}",
                "=r,r,r", [w], dtype=tl.float16, is_pure=True, pack=2)
    elif BITS == 8 and I == 2:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, m; prmt.b32 t, $1, $2, 0x6622; lop3.b32 t, t, 0x00FF00FF, 0x64006400, 0xea; "
                "mov.b32 m, 0x64006400; sub.f16x2 $0, t, m;}",
                "=r,r,r", [w], dtype=tl.float16, is_pure=True, pack=2)
    elif BITS == 8 and I == 3:
        h = tl.inline_asm_elementwise(
                "{.reg .b32 t, m; prmt.b32 t, $1, $2, 0x7733; lop3.b32 t, t, 0x00FF00FF, 0x64006400, 0xea; "
                "mov.b32 m, 0x64006400; sub.f16x2 $0, t, m;}",
                "=r,r,r", [w], dtype=tl.float16, is_pure=True, pack=2)
    return h


@triton.jit
def _load_tile(ptr, BITS: tl.constexpr, SW: tl.constexpr, ASM: tl.constexpr):
    """A [BLOCK, D] tile as four [BLOCK, D/4] fp16 slices: codes load their containers once and
    unpack each slice from them; 16-bit values load the four column ranges."""
    if BITS == 16:
        t0 = tl.load(ptr)
        t1 = tl.load(ptr + SW)
        t2 = tl.load(ptr + 2 * SW)
        t3 = tl.load(ptr + 3 * SW)
    else:
        w = tl.load(ptr)
        t0 = _codes_to_half(w, 0, BITS, ASM)
        t1 = _codes_to_half(w, 1, BITS, ASM)
        t2 = _codes_to_half(w, 2, BITS, ASM)
        t3 = _codes_to_half(w, 3, BITS, ASM)
    return t0, t1, t2, t3


@triton.jit
def _v_slice(acc, alpha, p, pv, vtile, vs_ptr, vz_ptr, rows, I: tl.constexpr, D: tl.constexpr,
             BITS: tl.constexpr, GV: tl.constexpr):
    """acc [GP, D/4] * alpha + p @ v for slice I. With one V group per token (GV = D, or 16
    bits) `pv` is p already scaled and cast once for all slices (the zero term is kept apart);
    with narrower groups each slice scales p by its own group and adds its own p @ zero."""
    acc = acc * alpha[:, None]
    if BITS == 16 or GV >= D:
        acc += tl.dot(pv, vtile)
    else:
        SW: tl.constexpr = D // 4
        NG: tl.constexpr = D // GV
        g = (I * SW) // GV
        vsc = tl.load(vs_ptr + rows * NG + g).to(tl.float32)
        vzp = tl.load(vz_ptr + rows * NG + g).to(tl.float32)
        acc += tl.dot((p * vsc[None, :]).to(tl.float16), vtile)
        acc += tl.sum(p * vzp[None, :], 1)[:, None]
    return acc


@triton.jit
def _segment(q_ptr, kc_ptr, vc_ptr, ks_ptr, kz_ptr, vs_ptr, vz_ptr, m_ptr, l_ptr, acc_ptr,
             bh, split, n_splits, part, total_parts, Ls, stride, qk_scale,
             G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BITS: tl.constexpr,
             BLOCK: tl.constexpr, GK: tl.constexpr, GV: tl.constexpr, ASM: tl.constexpr):
    """One split of one segment for one (sequence, KV head): online softmax over its tokens,
    partial (m, l, acc) written to slot `part` of this row's partials."""
    SW: tl.constexpr = D // 4
    offs_g = tl.arange(0, GP)
    offs_s = tl.arange(0, SW)
    gm = offs_g[:, None] < G
    qrow = q_ptr + (bh * G + offs_g[:, None]) * D + offs_s[None, :]
    # q pre-scaled by 1/sqrt(D) * log2(e): the softmax runs on exp2
    q0 = tl.load(qrow + 0 * SW, mask=gm, other=0.0).to(tl.float32) * qk_scale
    q1 = tl.load(qrow + 1 * SW, mask=gm, other=0.0).to(tl.float32) * qk_scale
    q2 = tl.load(qrow + 2 * SW, mask=gm, other=0.0).to(tl.float32) * qk_scale
    q3 = tl.load(qrow + 3 * SW, mask=gm, other=0.0).to(tl.float32) * qk_scale
    chunk = tl.cdiv(tl.cdiv(Ls, n_splits), BLOCK) * BLOCK      # whole blocks: one K group per block
    start = split * chunk
    stop = tl.minimum(start + chunk, Ls)
    m_i = tl.full([GP], float("-inf"), tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    a0 = tl.zeros([GP, SW], tl.float32)
    a1 = tl.zeros([GP, SW], tl.float32)
    a2 = tl.zeros([GP, SW], tl.float32)
    a3 = tl.zeros([GP, SW], tl.float32)
    z_i = tl.zeros([GP], tl.float32)            # sum of p * V zero (one V group per token)
    # rows are padded to whole blocks (stride), so tiles load unmasked; lm masks the scores
    if BITS == 16:
        row_elems = D
    else:
        row_elems = SW
    base = bh.to(tl.int64) * stride
    tile = (base + start + tl.arange(0, BLOCK))[:, None] * row_elems + offs_s[None, :]
    kp = kc_ptr + tile
    vp = vc_ptr + tile
    ngk = stride // GK
    for s in range(start, stop, BLOCK):
        offs_l = s + tl.arange(0, BLOCK)
        lm = offs_l < stop
        rows = base + offs_l
        k0, k1, k2, k3 = _load_tile(kp, BITS, SW, ASM)
        if BITS == 16:
            sc = tl.dot(q0.to(tl.float16), tl.trans(k0))
            sc += tl.dot(q1.to(tl.float16), tl.trans(k1))
            sc += tl.dot(q2.to(tl.float16), tl.trans(k2))
            sc += tl.dot(q3.to(tl.float16), tl.trans(k3))
        else:
            # per-channel K group of this block: q * scale on the codes, q . zero once
            grow = (bh.to(tl.int64) * ngk + s // GK) * D + offs_s
            ks0 = tl.load(ks_ptr + grow + 0 * SW).to(tl.float32)
            ks1 = tl.load(ks_ptr + grow + 1 * SW).to(tl.float32)
            ks2 = tl.load(ks_ptr + grow + 2 * SW).to(tl.float32)
            ks3 = tl.load(ks_ptr + grow + 3 * SW).to(tl.float32)
            kz0 = tl.load(kz_ptr + grow + 0 * SW).to(tl.float32)
            kz1 = tl.load(kz_ptr + grow + 1 * SW).to(tl.float32)
            kz2 = tl.load(kz_ptr + grow + 2 * SW).to(tl.float32)
            kz3 = tl.load(kz_ptr + grow + 3 * SW).to(tl.float32)
            sc = tl.dot((q0 * ks0[None, :]).to(tl.float16), tl.trans(k0))
            sc += tl.dot((q1 * ks1[None, :]).to(tl.float16), tl.trans(k1))
            sc += tl.dot((q2 * ks2[None, :]).to(tl.float16), tl.trans(k2))
            sc += tl.dot((q3 * ks3[None, :]).to(tl.float16), tl.trans(k3))
            zq = tl.sum(q0 * kz0[None, :] + q1 * kz1[None, :] + q2 * kz2[None, :] + q3 * kz3[None, :], 1)
            sc += zq[:, None]
        sc = tl.where(lm[None, :], sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(sc - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
        if BITS == 16:
            pv = p.to(tl.float16)
        elif GV >= D:      # one V scale and zero per token: fold them once for all four slices
            vsc = tl.load(vs_ptr + rows).to(tl.float32)
            vzp = tl.load(vz_ptr + rows).to(tl.float32)
            pv = (p * vsc[None, :]).to(tl.float16)
            z_i = z_i * alpha + tl.sum(p * vzp[None, :], 1)
        else:
            pv = p.to(tl.float16)          # unused: each slice scales p by its own group
        v0, v1, v2, v3 = _load_tile(vp, BITS, SW, ASM)
        kp += BLOCK * row_elems
        vp += BLOCK * row_elems
        a0 = _v_slice(a0, alpha, p, pv, v0, vs_ptr, vz_ptr, rows, 0, D, BITS, GV)
        a1 = _v_slice(a1, alpha, p, pv, v1, vs_ptr, vz_ptr, rows, 1, D, BITS, GV)
        a2 = _v_slice(a2, alpha, p, pv, v2, vs_ptr, vz_ptr, rows, 2, D, BITS, GV)
        a3 = _v_slice(a3, alpha, p, pv, v3, vs_ptr, vz_ptr, rows, 3, D, BITS, GV)
    o = (bh * total_parts + part) * GP + offs_g
    real = offs_g < G                            # the padded rows' partials are never read
    tl.store(m_ptr + o, m_i, mask=real)
    tl.store(l_ptr + o, l_i, mask=real)
    arow = acc_ptr + o[:, None] * D + offs_s[None, :]
    z = z_i[:, None]
    tl.store(arow + 0 * SW, a0 + z, mask=gm)
    tl.store(arow + 1 * SW, a1 + z, mask=gm)
    tl.store(arow + 2 * SW, a2 + z, mask=gm)
    tl.store(arow + 3 * SW, a3 + z, mask=gm)


@triton.jit
def _lowbit_decode(q_ptr, m_ptr, l_ptr, acc_ptr, qk_scale,
                   akc, avc, aks, akz, avs, avz, a_len, a_stride, a_splits,
                   bkc, bvc, bks, bkz, bvs, bvz, b_len, b_stride, b_splits,
                   ckc, cvc, cks, ckz, cvs, cvz, c_len, c_stride, c_splits,
                   G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
                   A_BITS: tl.constexpr, B_BITS: tl.constexpr, C_BITS: tl.constexpr,
                   GK: tl.constexpr, GV: tl.constexpr, ASM: tl.constexpr):
    """Grid (B * KVH, a_splits + b_splits + c_splits): program (bh, j) runs split j of the
    concatenated segments A, B, C (each a storage width; an empty one has 0 splits)."""
    bh = tl.program_id(0)
    j = tl.program_id(1)
    total = a_splits + b_splits + c_splits
    if j < a_splits:
        _segment(q_ptr, akc, avc, aks, akz, avs, avz, m_ptr, l_ptr, acc_ptr, bh, j, a_splits, j,
                 total, a_len, a_stride, qk_scale, G, GP, D, A_BITS, BLOCK, GK, GV, ASM)
    elif j < a_splits + b_splits:
        _segment(q_ptr, bkc, bvc, bks, bkz, bvs, bvz, m_ptr, l_ptr, acc_ptr, bh, j - a_splits,
                 b_splits, j, total, b_len, b_stride, qk_scale, G, GP, D, B_BITS, BLOCK, GK, GV, ASM)
    else:
        _segment(q_ptr, ckc, cvc, cks, ckz, cvs, cvz, m_ptr, l_ptr, acc_ptr, bh,
                 j - a_splits - b_splits, c_splits, j, total, c_len, c_stride, qk_scale,
                 G, GP, D, C_BITS, BLOCK, GK, GV, ASM)


@triton.jit
def _combine(m_ptr, l_ptr, acc_ptr, out_ptr, total_parts,
             G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, SP: tl.constexpr):
    """Grid (B * KVH * G,): one query head merges its partials, all splits loaded at once
    ([SP] maxima and sums, an [SP, D] tile of accumulators), into out [B*KVH*G, D] fp16."""
    row = tl.program_id(0)
    bh = row // G
    g = row % G
    offs_s = tl.arange(0, SP)
    offs_d = tl.arange(0, D)
    valid = offs_s < total_parts
    o = (bh * total_parts + offs_s) * GP + g
    m = tl.load(m_ptr + o, mask=valid, other=float("-inf"))
    l = tl.load(l_ptr + o, mask=valid, other=0.0)
    acc = tl.load(acc_ptr + o[:, None] * D + offs_d[None, :], mask=valid[:, None], other=0.0)
    w = tl.exp2(m - tl.max(m, 0))                 # empty splits carry m = -inf: weight 0
    w = tl.where(valid, w, 0.0)
    out = tl.sum(acc * w[:, None], 0) / tl.sum(l * w, 0)
    tl.store(out_ptr + row * D + offs_d, out.to(tl.float16))


# --------------------------------------------------------------------------- packing (offline, torch)
def _wrap(x: torch.Tensor, bits: int) -> torch.Tensor:
    """int64 container values -> the signed container dtype, two's complement (int16/int32)."""
    dtype = CONTAINER[bits]
    width = 8 * torch.tensor([], dtype=dtype).element_size()
    if dtype.is_signed:
        x = torch.where(x >= 1 << (width - 1), x - (1 << width), x)
    return x.to(dtype)


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Integer codes [..., D] in [0, 2**bits) -> containers [..., D/4]: container j holds
    columns j + i*D/4 at bit offset i*bits (the slice order the kernel's tiles unpack)."""
    d = codes.shape[-1]
    sw = d // SLICES
    c = codes.to(torch.int64)
    out = torch.zeros(*codes.shape[:-1], sw, dtype=torch.int64, device=codes.device)
    for i in range(SLICES):
        out |= c[..., i * sw:(i + 1) * sw] << (i * bits)
    return _wrap(out, bits)


def unpack_codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of pack_codes (int64 codes [..., D])."""
    w = packed.to(torch.int64) & ((1 << (8 * packed.element_size())) - 1)
    return torch.cat([(w >> (i * bits)) & ((1 << bits) - 1) for i in range(SLICES)], -1)


def _minmax_codes(x: torch.Tensor, dim: int, bits: int):
    """Asymmetric round-to-nearest over `dim`: (codes, fp16 scale, fp16 zero), the scale and
    zero rounded to fp16 first so that codes * scale + zero is what the kernel computes."""
    lo = x.amin(dim, keepdim=True)
    hi = x.amax(dim, keepdim=True)
    scale = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-4).half()
    zero = lo.half()
    codes = ((x - zero.float()) / scale.float()).round().clamp(0, 2 ** bits - 1)
    return codes.to(torch.int64), scale, zero


def padded(ls: int) -> int:
    """Rows a segment stores per (sequence, KV head): whole ROW_PAD-token blocks, so that the
    kernel's tiles load without masks (the padding's scores are masked instead)."""
    return -(-ls // ROW_PAD) * ROW_PAD


def _pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x [BH, n, ...] -> [BH, rows, ...], zero rows appended."""
    extra = rows - x.shape[1]
    return torch.cat([x, x.new_zeros(x.shape[0], extra, *x.shape[2:])], 1).contiguous() if extra else x.contiguous()


def quantize_segment(k: torch.Tensor, v: torch.Tensor, bits: int, gk: int, gv: int) -> dict:
    """K/V [BH, Ls, D] float of one storage width -> the kernel's packed segment (module doc)."""
    bh, ls, d = k.shape
    stride = padded(ls)
    if bits == 16:
        return {"bits": 16, "len": ls, "stride": stride,
                "kc": _pad_rows(k.half(), stride), "vc": _pad_rows(v.half(), stride)}
    n_groups = -(-ls // gk)
    pad = n_groups * gk - ls
    kp = torch.cat([k, k[:, -1:].expand(bh, pad, d)], 1) if pad else k
    kcodes, ks, kz = _minmax_codes(kp.float().view(bh, n_groups, gk, d), 2, bits)
    vcodes, vs, vz = _minmax_codes(v.float().view(bh, ls, d // gv, gv), 3, bits)
    return {"bits": bits, "len": ls, "stride": stride,
            "kc": _pad_rows(pack_codes(kcodes.view(bh, n_groups * gk, d)[:, :ls], bits), stride),
            "vc": _pad_rows(pack_codes(vcodes.view(bh, ls, d), bits), stride),
            "ks": _pad_rows(ks.view(bh, n_groups, d), stride // gk),
            "kz": _pad_rows(kz.view(bh, n_groups, d), stride // gk),
            "vs": _pad_rows(vs.view(bh, ls, d // gv), stride), "vz": _pad_rows(vz.view(bh, ls, d // gv), stride)}


def dequantize_segment(seg: dict, gk: int, gv: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The float K and V a packed segment stands for (what the reference attends over)."""
    bits, ls = seg["bits"], seg["len"]
    if bits == 16:
        return seg["kc"][:, :ls].float(), seg["vc"][:, :ls].float()
    kcodes = unpack_codes(seg["kc"][:, :ls], bits).float()
    vcodes = unpack_codes(seg["vc"][:, :ls], bits).float()
    bh, _, d = kcodes.shape
    token_group = torch.arange(ls, device=kcodes.device) // gk
    k = kcodes * seg["ks"].float()[:, token_group] + seg["kz"].float()[:, token_group]
    chan_group = torch.arange(d, device=kcodes.device) // gv
    vs, vz = seg["vs"][:, :ls].float(), seg["vz"][:, :ls].float()
    return k, vcodes * vs[:, :, chan_group] + vz[:, :, chan_group]


def pack_cache(k: torch.Tensor, v: torch.Tensor, classes: dict[str, tuple[int, int]],
               gk: int = 128, gv: int = 128) -> list[dict]:
    """K/V [B, KVH, L, D] -> up to three packed segments, one per storage width, in class order.

    Sinks are the first tokens and the recent window the last; outliers are the middle tokens
    with the largest key norm (per sequence and KV head). Classes of one width share a
    segment: attention over a set of tokens does not depend on their order."""
    b, kvh, length, d = k.shape
    k = k.reshape(b * kvh, length, d)
    v = v.reshape(b * kvh, length, d)
    n_sinks, n_recent, n_out = classes["sinks"][0], classes["recent"][0], classes["outliers"][0]
    middle = slice(n_sinks, length - n_recent)
    norms = k[:, middle].float().norm(dim=-1)
    order = norms.argsort(dim=1, descending=True, stable=True) + n_sinks
    rows = torch.arange(b * kvh, device=k.device)[:, None]
    token_sets = {"sinks": torch.arange(n_sinks, device=k.device).expand(b * kvh, n_sinks),
                  "outliers": order[:, :n_out],
                  "routine": order[:, n_out:].sort(dim=1).values,
                  "recent": torch.arange(length - n_recent, length, device=k.device).expand(b * kvh, n_recent)}
    by_width: dict[int, list[torch.Tensor]] = {}
    for name, (count, bits) in classes.items():
        if count:
            by_width.setdefault(bits, []).append(token_sets[name])
    if len(by_width) > 3:
        raise ValueError(f"the kernel takes at most 3 storage widths, got {sorted(by_width)}")
    segments = []
    for bits, sets in by_width.items():
        idx = torch.cat(sets, 1)
        segments.append(quantize_segment(k[rows, idx], v[rows, idx], bits, gk, gv))
    return segments


def random_cache(batch: int, kv_heads: int, head_dim: int, classes: dict[str, tuple[int, int]],
                 gk: int = 128, gv: int = 128, device: str = "cpu", seed: int = 0) -> list[dict]:
    """Segments as pack_cache lays them out, filled with random codes, scales and zeros: what a
    timing needs at 128k tokens without quantizing a float cache first (never zeros)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    bh, d = batch * kv_heads, head_dim
    segments = []
    for bits, ls in segment_widths(classes):
        rows = padded(ls)
        if bits == 16:
            kc, vc = (torch.randn(bh, rows, d, generator=gen, device=device, dtype=torch.float16)
                      for _ in range(2))
            segments.append({"bits": 16, "len": ls, "stride": rows, "kc": kc, "vc": vc})
            continue
        info = torch.iinfo(CONTAINER[bits])
        codes = lambda: torch.randint(info.min, info.max, (bh, rows, d // SLICES), generator=gen,  # noqa: E731
                                      device=device, dtype=CONTAINER[bits])
        uniform = lambda *shape, lo, hi: (torch.rand(*shape, generator=gen, device=device)  # noqa: E731
                                          * (hi - lo) + lo).half()
        segments.append({"bits": bits, "len": ls, "stride": rows, "kc": codes(), "vc": codes(),
                         "ks": uniform(bh, rows // gk, d, lo=0.5 / 2 ** bits, hi=2.0 / 2 ** bits),
                         "kz": uniform(bh, rows // gk, d, lo=-1.0, hi=-0.5),
                         "vs": uniform(bh, rows, d // gv, lo=0.5 / 2 ** bits, hi=2.0 / 2 ** bits),
                         "vz": uniform(bh, rows, d // gv, lo=-1.0, hi=-0.5)})
    return segments


# --------------------------------------------------------------------------- launch
class FastKVAttention:
    """Decode attention of q [B, H, D] over packed segments, with preallocated partials.

    One launch runs every split of every segment; a second combines. `splits` (per segment,
    in segment order) defaults to plan_splits."""

    def __init__(self, segments: list[dict], batch: int, heads: int, kv_heads: int, head_dim: int,
                 gk: int = 128, gv: int = 128, block: int = 64, warps: int = 4, stages: int = 2,
                 splits: list[int] | None = None, group_rows: int = 16, asm: bool = False,
                 lean: bool = False):
        if not 1 <= len(segments) <= 3:
            raise ValueError("1 to 3 segments")
        if gk % block or ROW_PAD % block or head_dim % (SLICES * 16) or gv % (head_dim // SLICES) or head_dim % gv:
            raise ValueError(f"block {block} must divide gk {gk}; gv {gv} must be a multiple of "
                             f"D/4 = {head_dim // SLICES} dividing D")
        self.segments = segments
        self.B, self.H, self.KVH, self.D = batch, heads, kv_heads, head_dim
        self.G = heads // kv_heads
        self.GP = max(group_rows, triton.next_power_of_2(self.G))
        self.gk, self.gv, self.block, self.warps, self.stages = gk, gv, block, warps, stages
        self.asm = asm          # the inline-PTX dequant (GPU only)
        rows = batch * kv_heads
        self.splits = splits or plan_splits([(s["bits"], s["len"]) for s in segments], rows, block)
        self.total = sum(self.splits)
        dev = segments[0]["kc"].device
        n = rows * self.total * self.GP
        self.m = torch.empty(n, dtype=torch.float32, device=dev)
        self.l = torch.empty(n, dtype=torch.float32, device=dev)
        self.acc = torch.empty(n, head_dim, dtype=torch.float32, device=dev)
        self.out = torch.empty(batch, heads, head_dim, dtype=torch.float16, device=dev)
        self._dummy = torch.zeros(1, dtype=torch.float16, device=dev)
        self.lean = lean        # empty slots at the first segment's width, not 16 bits (_slot)
        first = segments[0]["bits"]
        self._lean_codes = torch.zeros(1, dtype=CONTAINER[first], device=dev) if first < 16 else self._dummy
        self.compiled = None    # the main kernel's compiled object, once launched on a GPU (metadata)

    def _slot(self, i: int):
        """Kernel arguments of segment slot i. An empty slot (0 tokens, 0 splits) is compiled at
        16 bits, or (lean) at the first segment's width: any 16-bit slot, run or not, makes the
        compiled program hold 128 KiB of shared memory (its pipelined bf16 tiles), one program
        per SM; all-2-bit slots hold 17 KiB (calibration/fast_occupancy.py)."""
        if i >= len(self.segments):
            d = self._dummy
            bits = self.segments[0]["bits"] if self.lean else 16
            codes = self._lean_codes if bits < 16 else d
            return (codes, codes, d, d, d, d, 0, 0, 0), bits
        s = self.segments[i]
        scales = [s.get(key, self._dummy) for key in ("ks", "kz", "vs", "vz")]
        return (s["kc"], s["vc"], *scales, s["len"], s["stride"], self.splits[i]), s["bits"]

    def __call__(self, q: torch.Tensor) -> torch.Tensor:
        (a, a_bits), (b, b_bits), (c, c_bits) = (self._slot(i) for i in range(3))
        rows = self.B * self.KVH
        qk_scale = LOG2E / math.sqrt(self.D)
        self.compiled = _lowbit_decode[(rows, self.total)](
            q, self.m, self.l, self.acc, qk_scale, *a, *b, *c,
            G=self.G, GP=self.GP, D=self.D, BLOCK=self.block, A_BITS=a_bits, B_BITS=b_bits,
            C_BITS=c_bits, GK=self.gk, GV=self.gv, ASM=self.asm, num_warps=self.warps, num_stages=self.stages)
        _combine[(rows * self.G,)](self.m, self.l, self.acc, self.out, self.total, G=self.G, GP=self.GP,
                                   D=self.D, SP=triton.next_power_of_2(self.total), num_warps=4)
        return self.out

    def program_metadata(self) -> dict:
        """Shared memory (bytes), registers and spills per thread, warps of the compiled main
        kernel: what sets the programs an SM holds (issue 44). {} before a GPU launch (the
        interpreter compiles nothing)."""
        k = self.compiled
        if k is None or not hasattr(k, "metadata"):
            return {}
        if getattr(k, "n_regs", None) is None and hasattr(k, "_init_handles"):
            k._init_handles()               # Triton loads the binary (and reads its registers) lazily
        out = {"smem_bytes": k.metadata.shared, "warps": k.metadata.num_warps}
        out.update({name: getattr(k, attr) for name, attr in (("regs", "n_regs"), ("spills", "n_spills"))
                    if getattr(k, attr, None) is not None})
        return out

    def bytes_read(self) -> int:
        """HBM bytes the attention must read: every segment's codes, scales and zeros (of its
        real tokens, not the padding), and q."""
        rows = self.B * self.KVH
        return self.B * self.H * self.D * 2 + sum(
            segment_bytes(s["bits"], s["len"], rows, self.D, self.gk, self.gv) for s in self.segments)


# --------------------------------------------------------------------------- reference
def reference(q: torch.Tensor, segments: list[dict], kv_heads: int, gk: int = 128,
              gv: int = 128) -> torch.Tensor:
    """Pure-torch decode attention in fp32 over the dequantized segments: q [B, H, D] -> [B, H, D]."""
    b, h, d = q.shape
    parts = [dequantize_segment(s, gk, gv) for s in segments]
    k = torch.cat([p[0] for p in parts], 1).view(b, kv_heads, -1, d)
    v = torch.cat([p[1] for p in parts], 1).view(b, kv_heads, -1, d)
    qg = q.float().view(b, kv_heads, h // kv_heads, d)
    p = torch.softmax(torch.einsum("bkgd,bkld->bkgl", qg, k) / math.sqrt(d), -1)
    return torch.einsum("bkgl,bkld->bkgd", p, v).reshape(b, h, d)
