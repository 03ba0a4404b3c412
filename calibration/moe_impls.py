"""The MoE layer schedules and quantized linears measured on the H200 (issue 16).

Shared by calibration/measure_moe_kernels.py (per-kernel CUPTI traces) and
validation/measure_moe_steps.py (whole graph-mode decode steps):

- `grouped_moe`: torchtitan's grouped-GEMM MoE, all on the GPU inside the graph: router GEMM,
  float32 softmax, torch.topk, argsort of the expert ids, tokens per expert by scatter-add,
  cumsum into int32 offsets, one index_select gather, torch._grouped_mm gate+up, SiLU and
  multiply, torch._grouped_mm down, the router-weight scale, one index_add_ scatter.
- `fused_moe`: a Triton fused MoE in vLLM's design (fused_moe.py): moe_align_block_size (one
  kernel here, a sentinel fill before it), one kernel per projection that gathers its own rows
  through the sorted token ids (the down one multiplies by the router weight), a fused SiLU x up
  kernel between them, and a final sum over the k copies of each token.
- `fp8_linear`: torch._scaled_mm with a per-tensor weight scale and a static activation scale
  (one cast kernel, then the FP8 GEMM); `int4_linear`: torch._weight_int4pack_mm (tinygemm,
  group-wise scales and zeros); `w4a16_linear`: a Triton W4A16 GEMM (GPTQ/AWQ-style packing,
  8 nibbles along K in an int32, group-wise bf16 scales, symmetric zero point 8).

Routing is fixed per case (as in validation/measure_steps.py): the router GEMM, softmax and
top-k run for their cost, and a fixed [tokens, k] choice of experts is used from there on.
Without CUDA (--dry on a CPU) every GPU-only op falls back to a plain PyTorch reference.
"""

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except Exception:       # no Triton (CPU dry run)
    triton = None

FP8 = getattr(torch, "float8_e4m3fn", None)


def on_cuda(t):
    return t.is_cuda and triton is not None


# ----------------------------------------------------------------------------- grouped (torchtitan)
def grouped_mm(x, w_t, offs):
    """torch._grouped_mm(x [rows, K], w_t [E, K, N], offs int32 [E] cumulative ends)."""
    if x.is_cuda:
        return torch._grouped_mm(x, w_t, offs=offs)
    out, start = [], 0
    for e, end in enumerate(offs.tolist()):
        out.append(x[start:end] @ w_t[e])
        start = end
    return torch.cat(out)


def grouped_moe(h, wr, w13_t, w2_t, topi_fixed, topw_fixed, E, k, ff, out=None):
    """torchtitan's MoE (moe.py: TokenChoiceTopKRouter + GroupedExperts._run_experts_grouped_mm,
    gate and up fused in one weight). w13_t [E, d, 2ff] and w2_t [E, ff, d] are transposed views
    of row-major [E, 2ff, d] / [E, d, ff] weights, as torchtitan passes them."""
    T = h.shape[0]
    scores = h @ wr.t()
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
    torch.topk(probs, k, dim=-1)                    # its cost; routing below is the fixed draw
    flat = topi_fixed.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(E, dtype=torch.int64, device=h.device).scatter_add_(
        0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    tok = order // k
    xs = h.index_select(0, tok)
    gu = grouped_mm(xs, w13_t, offs)
    a = F.silu(gu[:, :ff]) * gu[:, ff:]
    y = grouped_mm(a, w2_t, offs)
    y = y * topw_fixed.reshape(-1)[order].unsqueeze(1).to(y.dtype)
    if out is None:
        out = torch.zeros(T, h.shape[1], device=h.device, dtype=h.dtype)
    out.index_add_(0, tok, y)
    return out


# ----------------------------------------------------------------------------- fused (vLLM design)
if triton is not None:
    @triton.jit
    def _align_kernel(ids_ptr, sorted_ptr, expert_ids_ptr, npost_ptr, cnt_ptr, pstart_ptr,
                      numel, E: tl.constexpr, BM: tl.constexpr, NP: tl.constexpr,
                      EP: tl.constexpr, MAXB: tl.constexpr):
        """moe_align_block_size in one program: count tokens per expert, pad each expert's
        segment to BM rows, place every (token, slot) at its expert's padded offset in
        stable order, and name the expert of every BM-row block."""
        offs = tl.arange(0, NP)
        valid = offs < numel
        ids = tl.load(ids_ptr + offs, mask=valid, other=E)
        for e in range(E):
            tl.store(cnt_ptr + e, tl.sum((ids == e).to(tl.int32)))
        tl.debug_barrier()
        eo = tl.arange(0, EP)
        c = tl.load(cnt_ptr + eo, mask=eo < E, other=0)
        padded = (c + BM - 1) // BM * BM
        pend = tl.cumsum(padded, 0)
        tl.store(pstart_ptr + eo, pend - padded, mask=eo < E)
        tl.store(cnt_ptr + E + eo, pend, mask=eo < E)
        total = tl.sum(padded)
        tl.store(npost_ptr, total)
        tl.debug_barrier()
        rank = tl.zeros([NP], dtype=tl.int32)
        for e in range(E):
            m = (ids == e).to(tl.int32)
            rank = tl.where(ids == e, tl.cumsum(m, 0) - 1, rank)
        pos = tl.load(pstart_ptr + ids, mask=valid, other=0) + rank
        tl.store(sorted_ptr + pos, offs, mask=valid)
        b = tl.arange(0, MAXB)
        eid = tl.zeros([MAXB], dtype=tl.int32)
        for e in range(E):
            pe = tl.load(cnt_ptr + E + e)
            eid += (b * BM >= pe).to(tl.int32)
        tl.store(expert_ids_ptr + b, eid, mask=b * BM < total)

    @triton.jit
    def _fused_moe_kernel(a_ptr, b_ptr, c_ptr, w_ptr, sorted_ptr, expert_ids_ptr, npost_ptr,
                          N, K, num_valid, stride_am, stride_be, stride_bn, stride_cm,
                          top_k: tl.constexpr, MUL_W: tl.constexpr, BM: tl.constexpr,
                          BN: tl.constexpr, BK: tl.constexpr):
        """vLLM's fused_moe_kernel (bf16): one program per (BM-row block of one expert, BN
        columns); it gathers its rows through the sorted token ids (row // top_k of the input
        for the first projection), streams its expert's weight tile over K, and writes the
        rows back in (token, slot) order."""
        pid = tl.program_id(0)
        num_n = tl.cdiv(N, BN)
        pid_m = pid // num_n
        pid_n = pid % num_n
        if pid_m * BM >= tl.load(npost_ptr):
            return
        offs_m = pid_m * BM + tl.arange(0, BM)
        tok = tl.load(sorted_ptr + offs_m)
        tmask = tok < num_valid
        e = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + (tok[:, None] // top_k) * stride_am + offs_k[None, :]
        b_ptrs = b_ptr + e * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(0, tl.cdiv(K, BK)):
            kmask = offs_k < K - kk * BK
            a = tl.load(a_ptrs, mask=tmask[:, None] & kmask[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=kmask[:, None] & (offs_n[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
            a_ptrs += BK
            b_ptrs += BK
        if MUL_W:
            w = tl.load(w_ptr + tok, mask=tmask, other=0.0)
            acc = acc * w[:, None]
        c_ptrs = c_ptr + tok[:, None] * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, acc.to(tl.bfloat16), mask=tmask[:, None] & (offs_n[None, :] < N))

    @triton.jit
    def _silu_mul_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        """vLLM's silu_and_mul: y[r] = silu(x[r, :ff]) * x[r, ff:], one program per row block."""
        r = tl.program_id(0)
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = c < n_cols
        g = tl.load(x_ptr + r * 2 * n_cols + c, mask=m, other=0.0).to(tl.float32)
        u = tl.load(x_ptr + r * 2 * n_cols + n_cols + c, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + r * n_cols + c, (g / (1.0 + tl.exp(-g)) * u).to(tl.bfloat16), mask=m)


def fused_config(T, E):
    """vLLM's get_default_config for bf16 without a tuned file: a 16-row block while the tokens
    do not outnumber the experts, else 64 rows."""
    if T <= E:
        return dict(BM=16, BN=32, BK=64, num_warps=4, num_stages=3)
    return dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=3)


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def moe_align(topi, E, BM):
    numel = topi.numel()
    maxp = numel + E * (BM - 1)
    maxb = -(-maxp // BM)
    sorted_ids = torch.full((maxb * BM,), numel, dtype=torch.int32, device=topi.device)
    expert_ids = torch.empty(maxb, dtype=torch.int32, device=topi.device)
    npost = torch.empty(1, dtype=torch.int32, device=topi.device)
    scratch = torch.empty(2 * E + _pow2(E), dtype=torch.int32, device=topi.device)
    pstart = torch.empty(_pow2(E), dtype=torch.int32, device=topi.device)
    _align_kernel[(1,)](topi.reshape(-1), sorted_ids, expert_ids, npost, scratch, pstart, numel,
                        E=E, BM=BM, NP=_pow2(numel), EP=_pow2(E), MAXB=_pow2(maxb), num_warps=4)
    return sorted_ids, expert_ids, npost, maxb


def fused_moe(h, wr, w13, w2, topi_fixed, topw_fixed, E, k, ff, cfg=None):
    """vLLM's fused_experts (bf16). w13 [E, 2ff, d] and w2 [E, d, ff] row-major."""
    T, d = h.shape
    scores = h @ wr.t()
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
    torch.topk(probs, k, dim=-1)
    if not on_cuda(h):
        return _fused_reference(h, w13, w2, topi_fixed, topw_fixed, k, ff)
    cfg = cfg or fused_config(T, E)
    BM, BN, BK = cfg["BM"], cfg["BN"], cfg["BK"]
    kw = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    sorted_ids, expert_ids, npost, maxb = moe_align(topi_fixed.to(torch.int32), E, BM)
    numel = T * k
    gu = torch.empty(numel, 2 * ff, device=h.device, dtype=h.dtype)
    w = topw_fixed.reshape(-1).to(torch.float32)
    _fused_moe_kernel[(maxb * triton.cdiv(2 * ff, BN),)](
        h, w13, gu, w, sorted_ids, expert_ids, npost, 2 * ff, d, numel, h.stride(0),
        w13.stride(0), w13.stride(1), gu.stride(0), top_k=k, MUL_W=False, BM=BM, BN=BN, BK=BK, **kw)
    a = torch.empty(numel, ff, device=h.device, dtype=h.dtype)
    _silu_mul_kernel[(numel, triton.cdiv(ff, 1024))](gu, a, ff, BLOCK=1024, num_warps=4)
    y = torch.empty(numel, d, device=h.device, dtype=h.dtype)
    _fused_moe_kernel[(maxb * triton.cdiv(d, BN),)](
        a, w2, y, w, sorted_ids, expert_ids, npost, d, ff, numel, a.stride(0),
        w2.stride(0), w2.stride(1), y.stride(0), top_k=1, MUL_W=True, BM=BM, BN=BN, BK=BK, **kw)
    return y.view(T, k, d).sum(dim=1)


def _fused_reference(h, w13, w2, topi, topw, k, ff):
    T, d = h.shape
    out = torch.zeros(T, d, dtype=torch.float32, device=h.device)
    for t in range(T):
        for j in range(k):
            e = int(topi[t, j])
            gu = h[t:t + 1] @ w13[e].t()
            a = F.silu(gu[:, :ff]) * gu[:, ff:]
            out[t] += (topw[t, j].float() * (a @ w2[e].t()).float())[0]
    return out.to(h.dtype)


# ----------------------------------------------------------------------------- quantized linears
class Fp8Weight:
    """W [n, k] as float8_e4m3fn with one per-tensor scale; stored column-major for _scaled_mm."""

    def __init__(self, w):
        amax = w.abs().amax().float().clamp(min=1e-12)
        self.scale = (amax / 448.0).reshape(()).to(w.device)
        self.q = (w.float() / self.scale).to(FP8).t()          # [k, n], column-major view
        self.one = torch.ones((), device=w.device, dtype=torch.float32)
        self.shape = w.shape
        self.nbytes = w.numel() + 4


def fp8_linear(x, w: Fp8Weight):
    """x [m, k] bf16 -> cast to FP8 (static activation scale 1) -> torch._scaled_mm."""
    xq = x.to(FP8)
    if x.is_cuda:
        return torch._scaled_mm(xq, w.q, scale_a=w.one, scale_b=w.scale, out_dtype=torch.bfloat16)
    return (xq.float() @ (w.q.float() * w.scale)).to(torch.bfloat16)


class Int4Weight:
    """W [n, k] quantized to 4 bits with group-wise (group_size along k) scale and zero point,
    packed for torch._weight_int4pack_mm (tinygemm) and, separately, for the Triton W4A16 kernel
    (8 nibbles along k in one int32, bf16 scales [k/g, n], symmetric zero point 8)."""

    def __init__(self, w, group_size=128, tinygemm=True, triton_pack=True):
        n, k = w.shape
        self.shape, self.g = (n, k), group_size
        wg = w.float().reshape(n, k // group_size, group_size)
        scale = (wg.abs().amax(-1) / 7.0).clamp(min=1e-8)                 # [n, k/g]
        q = (wg / scale[..., None]).round().clamp(-8, 7).to(torch.int32) + 8  # 0..15
        q = q.reshape(n, k)
        self.nbytes = n * k // 2 + 2 * n * (k // group_size) * 2           # nibbles + bf16 scale, zero
        if tinygemm:
            if w.is_cuda:
                packed = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
                self.tg = torch._convert_weight_to_int4pack(packed, 8)
            else:
                self.tg = None
            # tinygemm's scales_and_zeros [k/g, n, 2] bf16: w = (q - 8) * s, zero = -8 s + ... as
            # torchao's groupwise_affine packs it: x = (q - 2^3) * s, zero point stored as bf16 min
            zeros = torch.zeros_like(scale)
            self.sz = torch.stack([scale.t(), zeros.t()], -1).to(torch.bfloat16).contiguous()
        if triton_pack:
            qt = q.t().contiguous().reshape(k // 8, 8, n)                   # [k/8, 8, n]
            shifts = torch.arange(8, device=w.device, dtype=torch.int32).view(1, 8, 1) * 4
            self.packed = (qt << shifts).sum(1).to(torch.int32)            # [k/8, n]
            self.scales = scale.t().contiguous().to(torch.bfloat16)        # [k/g, n]
        self.ref = ((q - 8).float().reshape(n, k // group_size, group_size)
                    * scale[..., None]).reshape(n, k).to(torch.bfloat16) if not w.is_cuda else None


def int4_linear(x, w: Int4Weight):
    if x.is_cuda:
        return torch._weight_int4pack_mm(x, w.tg, w.g, w.sz)
    return x @ w.ref.t()


if triton is not None:
    @triton.jit
    def _w4a16_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, G: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        """y[M, N] = x[M, K] @ dequant(W)[K, N]: each program streams a BK x BN tile of packed
        nibbles per step, expands them in registers ((q - 8) * scale of its group) and feeds
        the tensor cores in bf16."""
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        shifts = (offs_k % 8) * 4
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(0, K // BK):
            k0 = kk * BK
            a = tl.load(x_ptr + offs_m[:, None] * K + k0 + offs_k[None, :], mask=offs_m[:, None] < M,
                        other=0.0)
            p = tl.load(w_ptr + ((k0 + offs_k[:, None]) // 8) * N + offs_n[None, :])
            q = (p >> shifts[:, None]) & 0xF
            s = tl.load(s_ptr + ((k0 + offs_k[:, None]) // G) * N + offs_n[None, :])
            b = ((q - 8).to(tl.float32) * s.to(tl.float32)).to(tl.bfloat16)
            acc += tl.dot(a, b)
        tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16),
                 mask=offs_m[:, None] < M)


W4A16_CFG = dict(BM=16, BN=64, BK=128, num_warps=4, num_stages=4)


def w4a16_linear(x, w: Int4Weight, cfg=None):
    M, K = x.shape
    N = w.shape[0]
    if not on_cuda(x):
        return x @ w.ref.t()
    cfg = cfg or W4A16_CFG
    BM = max(16, min(64, _pow2(M)))
    y = torch.empty(M, N, device=x.device, dtype=torch.bfloat16)
    grid = (triton.cdiv(M, BM), triton.cdiv(N, cfg["BN"]))
    _w4a16_kernel[grid](x, w.packed, w.scales, y, M, N, K, G=w.g, BM=BM, BN=cfg["BN"], BK=cfg["BK"],
                        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return y
