#!/usr/bin/env python3
"""Extra H200 microbenchmarks to calibrate hwsim's resource model (PyTorch + Triton).

How to run (on the H200; python3.12, torch 2.11+cu130, triton 3.6, numpy; no network needed):

    python3 calibration/measure_microbench.py --out $OUT/h200_microbench_extra.jsonl
    # smoke test (tiny sizes; on a CPU the Triton parts run in TRITON_INTERPRET=1 mode if
    # triton is installed, else they are skipped with a message):
    python3 calibration/measure_microbench.py --dry

Output: JSONL (default calibration/h200_microbench_extra.jsonl), one object a line with a `part`
field, flushed after every line. Timing as in shared/calibration/README.md: the work is captured
as one CUDA graph of `reps` repetitions (eager warm-up on a side stream first), 3 warm-up
replays, then 10-20 replays each timed with CUDA events; `ms` = median replay / reps, with
`p10`/`p90`. Where the point is HBM, inputs are rotated among enough copies (or offsets of one
big buffer) that they cannot stay in the 60 MB L2.

Parts (`--parts` picks a subset, comma-separated):
  meta         device, versions, nvidia-smi clocks.
  read_ctas    Triton streaming read of bf16 with a FIXED number of programs G (each loops over
               its contiguous share with BLOCK-wide vector loads, writes one fp32 partial sum),
               G in {1..528}, num_warps 4 and 8: ms, GB/s, GB/s per program -> bandwidth vs
               active SMs. Plus G=132 at 256 KiB..256 MiB per launch (fixed cost + ramp).
  latency      Triton single-program pointer chase (dependent int64 loads over a random cycle)
               over 64 KiB, 16 MiB (L2), 256 MiB and 4 GiB: ns per load.
  elementwise  the small ops of the decode schedule at decode sizes, 50 back-to-back in one
               graph, inputs L2-resident as inside a step: ms per op and bytes moved.
  gemm_ctas    torch.matmul(x[m,k], W[n,k]^T) bf16, W rotated over >= 512 MiB of copies:
               ms, weight GB/s, TFLOP/s.
  sdpa         F.scaled_dot_product_attention decode (GQA 32/8 and 32/4, hd 128; KV rotated
               over >= 256 MiB) and causal prefill; flash backend forced when available.
"""
import argparse
import gc
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_env import T_START, NullContext, flash_sdpa, log, smi_line, time_replays  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu" and "--dry" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported
try:
    import triton
    import triton.language as tl
    HAVE_TRITON = True
except Exception as _e:  # pragma: no cover
    HAVE_TRITON = False
    TRITON_ERR = repr(_e)

GiB, MiB, KiB = 2 ** 30, 2 ** 20, 2 ** 10
BF = torch.bfloat16


# ----------------------------------------------------------------------------- Triton kernels
if HAVE_TRITON:
    @triton.jit
    def _read_kernel(x_ptr, out_ptr, n, n_per, BLOCK: tl.constexpr, MASKED: tl.constexpr):
        """Program p sums x[p*n_per : min((p+1)*n_per, n)] in BLOCK-wide loads."""
        pid = tl.program_id(0)
        start = pid.to(tl.int64) * n_per
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in range(0, n_per, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            if MASKED:
                m = (offs < start + n_per) & (offs < n)
                acc += tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
            else:
                acc += tl.load(x_ptr + offs).to(tl.float32)
        tl.store(out_ptr + pid, tl.sum(acc, axis=0))

    @triton.jit
    def _chase_kernel(nxt_ptr, state_ptr, steps):
        """One program: p = nxt[p], `steps` times; resumes from and saves p in state."""
        p = tl.load(state_ptr)
        for _ in range(steps):
            p = tl.load(nxt_ptr + p)
        tl.store(state_ptr, p)


# ----------------------------------------------------------------------------- timing
SDPA_CTX = None


def sdpa_ctx():
    return SDPA_CTX() if SDPA_CTX is not None else NullContext()


def stats(xs):
    a = np.asarray(xs, dtype=float)
    return float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90))


def bench(fn, reps, replays=15, warm_replays=3, ctx=NullContext, warm_all=False):
    """Capture fn(0..reps-1) as one CUDA graph; return per-rep (median, p10, p90) in ms.

    Eager warm-up on a side stream first (fn(0), fn(1), or every rep with warm_all, so that
    Triton compiles every specialisation before capture). On CPU (--dry) just time the same
    reps with perf_counter."""
    nwarm = reps if warm_all else min(reps, 2)
    if DEV != "cuda":
        with ctx():
            for r in range(nwarm):
                fn(r)
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                for r in range(reps):
                    fn(r)
                ts.append((time.perf_counter() - t0) * 1e3 / reps)
        return stats(ts)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), ctx():
        for r in range(nwarm):
            fn(r)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), ctx():
        for r in range(reps):
            fn(r)
    torch.cuda.synchronize()
    ms = [t / reps for t in time_replays(g, replays, warm_replays)]
    del g
    return stats(ms)


def free_mem():
    gc.collect()
    if DEV == "cuda":
        torch.cuda.empty_cache()


def rnd(shape, scale=1.0):
    return torch.randn(shape, dtype=BF, device=DEV).mul_(scale)


# ----------------------------------------------------------------------------- parts
def part_read_ctas(W, dry):
    if not HAVE_TRITON:
        log(f"read_ctas: SKIPPED (triton not importable: {TRITON_ERR})")
        W({"part": "read_ctas", "skipped": "triton not available"})
        return
    block = 256 if dry else 4096
    buf_bytes = 4 * MiB if dry else 2 * GiB
    n_buf = buf_bytes // 2
    buf = rnd((n_buf,))
    out = torch.empty(1024, dtype=torch.float32, device=DEV)
    # correctness check of the kernel once (all programs, masked and unmasked)
    for G, n in ((7, n_buf // 37), (4, n_buf // 16)):
        n_per = triton.cdiv(triton.cdiv(n, G), block) * block if G == 4 else triton.cdiv(n, G)
        masked = (n_per * G != n) or (n_per % block != 0)
        _read_kernel[(G,)](buf, out, n, n_per, BLOCK=block, MASKED=masked, num_warps=4)
        got = out[:G].double().sum().item()
        ref = buf[:n].sum(dtype=torch.float64).item()
        ok = abs(got - ref) <= 1e-3 * max(1.0, buf[:n].abs().sum(dtype=torch.float64).item())
        log(f"read_ctas check G={G} n={n} masked={masked}: {got:.3f} vs {ref:.3f} ok={ok}")
        W({"part": "read_ctas_check", "G": G, "n": n, "got": got, "ref": ref, "ok": ok})

    def run_point(G, total_elems, warps, series):
        # each launch reads `total_elems` elements; launch r reads at offset r*total (rotating
        # through the big buffer so HBM, not L2, feeds the reads)
        n_per = triton.cdiv(total_elems, G)
        if n_per >= block:
            n_per = (n_per // block) * block
        else:
            n_per = triton.cdiv(n_per, 16) * 16
        n = min(total_elems, G * n_per)
        masked = not (n_per % block == 0 and G * n_per == n)
        nbytes = 2 * n
        rot = 128 * KiB if dry else 512 * MiB
        nslices = n_buf // n  # >= 2: a launch reads at most half the buffer
        reps = int(max(2, min(1024, math.ceil(rot / nbytes))))
        views = [buf[(r % nslices) * n:][:n] for r in range(reps)]

        def fn(r):
            _read_kernel[(G,)](views[r], out, n, n_per, BLOCK=block, MASKED=masked,
                               num_warps=warps)
        ms, p10, p90 = bench(fn, reps, replays=10 if not dry else 3, warm_all=True)
        rec = {"part": "read_ctas", "series": series, "G": G, "num_warps": warps, "block": block,
               "bytes": nbytes, "bytes_per_program": 2 * n_per, "masked": masked, "reps": reps,
               "rotated_bytes": reps * nbytes, "ms": ms, "p10": p10, "p90": p90,
               "gbps": nbytes / ms / 1e6, "gbps_per_program": nbytes / ms / 1e6 / G}
        W(rec)
        return rec

    gs = [1, 2, 4] if dry else [1, 2, 4, 8, 16, 32, 48, 66, 96, 132, 264, 528]
    per_prog = (16 * KiB) if dry else 16 * MiB
    for warps in (4, 8):
        for G in gs:
            total = min(buf_bytes // 2, G * per_prog) // 2
            r = run_point(G, total, warps, "ctas")
            log(f"read_ctas G={G:4d} warps={warps} {r['bytes'] / MiB:8.1f} MiB: {r['ms']:.4f} ms "
                f"{r['gbps']:8.1f} GB/s ({r['gbps_per_program']:.1f}/prog)")
    sizes = [64 * KiB, 256 * KiB] if dry else [256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB,
                                               256 * MiB]
    G = 4 if dry else 132
    for warps in (4, 8):
        for sz in sizes:
            r = run_point(G, sz // 2, warps, "size")
            log(f"read_ctas size G={G} warps={warps} {sz / MiB:8.3f} MiB: {r['ms'] * 1e3:.2f} us "
                f"{r['gbps']:8.1f} GB/s reps={r['reps']}")
    buf = out = None
    free_mem()


def part_latency(W, dry):
    if not HAVE_TRITON:
        log(f"latency: SKIPPED (triton not importable: {TRITON_ERR})")
        W({"part": "latency", "skipped": "triton not available"})
        return
    if dry:
        plan = [(64 * KiB, 128, 200), (1 * MiB, 128, 200)]
    else:  # (buffer bytes, spacing of the chained slots in bytes, loads per launch)
        # slots > all loads of one point (warm-up + 14 replays), so HBM points never revisit
        plan = [(64 * KiB, 128, 20000), (16 * MiB, 128, 20000), (256 * MiB, 256, 8000),
                (4 * GiB, 4096, 8000)]
    state = torch.zeros(1, dtype=torch.int64, device=DEV)
    for nbytes, spacing, steps in plan:
        n = nbytes // 8
        slots = nbytes // spacing
        stride = spacing // 8
        nxt = torch.zeros(n, dtype=torch.int64, device=DEV) if n <= 4 * MiB else \
            torch.empty(n, dtype=torch.int64, device=DEV)
        g = torch.Generator(device=DEV)
        g.manual_seed(1)
        perm = torch.randperm(slots, device=DEV, generator=g) * stride  # one random cycle
        nxt[perm] = perm.roll(-1)
        state.fill_(int(perm[0].item()))
        if dry:  # check the kernel against a host walk
            _chase_kernel[(1,)](nxt, state, 37, num_warps=1)
            p = int(perm[0].item())
            for _ in range(37):
                p = int(nxt[p].item())
            ok = int(state.item()) == p
            log(f"latency check: {ok}")
            W({"part": "latency_check", "ok": ok})
        if nbytes <= 64 * MiB:  # make it L2/L1-resident first (walk the whole cycle once)
            _chase_kernel[(1,)](nxt, state, slots, num_warps=1)
        ms, p10, p90 = bench(lambda r: _chase_kernel[(1,)](nxt, state, steps, num_warps=1), 1,
                             replays=10 if not dry else 3)
        rec = {"part": "latency", "bytes": nbytes, "slot_spacing": spacing, "slots": slots,
               "loads": steps, "ms": ms, "p10": p10, "p90": p90,
               "ns_per_load": ms * 1e6 / steps, "method": "triton 1-program pointer chase, "
               "int64 next-index over a random cycle of slots; each replay continues the cycle"}
        W(rec)
        log(f"latency {nbytes / MiB:9.3f} MiB spacing {spacing}: {rec['ns_per_load']:.1f} ns/load")
        nxt = perm = None
        free_mem()


def part_elementwise(W, dry):
    REPS = 50
    bs_norm = [1, 4] if dry else [1, 16, 64, 256]
    ds = [256] if dry else [2048, 4096]
    ffs = [64] if dry else [768, 14336]

    def rec(op, ms, p10, p90, nbytes, kernels=1, **kw):
        W({"part": "elementwise", "op": op, **kw, "reps": REPS, "ms": ms, "p10": p10, "p90": p90,
           "bytes": nbytes, "kernels": kernels, "gbps": nbytes / ms / 1e6})

    have_rms = hasattr(F, "rms_norm")
    for d in ds:
        w = rnd((d,))
        for B in bs_norm:
            x = rnd((B, d))
            if have_rms:
                rec("rmsnorm", *bench(lambda r: F.rms_norm(x, (d,), w, 1e-5), REPS),
                    2 * (2 * B * d + d), impl="F.rms_norm", B=B, d=d)

            def manual(r):
                xf = x.float()
                return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(BF) * w
            rec("rmsnorm_manual", *bench(manual, REPS), 2 * (2 * B * d + d), kernels=8,
                impl="x.float()*rsqrt(mean(x^2)+eps) -> bf16 * w", B=B, d=d)
            y = rnd((B, d))
            rec("residual_add", *bench(lambda r: x + y, REPS), 2 * 3 * B * d, B=B, d=d)
            z = torch.empty_like(x)
            rec("zero", *bench(lambda r: z.zero_(), REPS), 2 * B * d, B=B, d=d)
        log(f"elementwise rmsnorm/add/zero d={d} done")
    for ff in ffs:
        for B in ([1, 4] if dry else [1, 16, 64]):
            h = rnd((B, 2 * ff))
            rec("silu", *bench(lambda r: F.silu(h[:, :ff]), REPS), 2 * 2 * B * ff, B=B, ff=ff)
            a = rnd((B, ff))
            rec("mul", *bench(lambda r: a * h[:, ff:], REPS), 2 * 3 * B * ff, B=B, ff=ff)
            rec("silu_mul", *bench(lambda r: F.silu(h[:, :ff]) * h[:, ff:], REPS),
                2 * (2 * B * ff + 3 * B * ff), kernels=2, B=B, ff=ff)
    log("elementwise silu/mul done")
    src_rows = 8 if dry else 64
    for d in ds:
        src = rnd((src_rows, d))
        for nrows in ([1, 4] if dry else [1, 8, 64]):
            idx = torch.randperm(src_rows, device=DEV)[:nrows].sort().values
            rec("index_select", *bench(lambda r: src.index_select(0, idx), REPS),
                2 * 2 * nrows * d + 8 * nrows, n=nrows, d=d, src_rows=src_rows)
            zz = rnd((nrows, d), 0.01)
            dst = torch.zeros(src_rows, d, dtype=BF, device=DEV)
            rec("index_add", *bench(lambda r: dst.index_add_(0, idx, zz), REPS),
                2 * 3 * nrows * d + 8 * nrows, n=nrows, d=d, dst_rows=src_rows)
            wcol = rnd((nrows, 1))
            rec("scale_rows", *bench(lambda r: zz * wcol, REPS), 2 * (2 * nrows * d + nrows),
                n=nrows, d=d)
    log("elementwise index ops done")
    for E in ([8, 16] if dry else [8, 128]):
        for B in bs_norm:
            lg = rnd((B, E))
            rec("softmax", *bench(lambda r: torch.softmax(lg, -1, dtype=torch.float32), REPS),
                2 * B * E + 4 * B * E, B=B, E=E, out="fp32")
    for KVH in (8, 4):
        for B in ([1, 4] if dry else [1, 16, 64]):
            hd, L = (64 if dry else 128), (16 if dry else 512)
            cache = rnd((B, KVH, L + 1, hd))
            qkv = rnd((B, (32 + 2 * KVH) * hd))
            knew = qkv[:, 32 * hd:(32 + KVH) * hd].view(B, KVH, hd)
            rec("kv_cache_copy", *bench(lambda r: cache[:, :, L].copy_(knew), REPS),
                2 * 2 * B * KVH * hd, B=B, KVH=KVH, hd=hd, cache_len=L + 1,
                src="strided view of the QKV GEMM output")
    log("elementwise softmax/cache copy done")
    free_mem()


def part_gemm(W, dry):
    rot_target = 16 * MiB if dry else 512 * MiB
    pts = []
    if dry:
        for n in (64, 256):
            for m in (1, 8):
                pts.append(("sweep_k256", m, 256, n))
        pts.append(("mixtral_w13_like", 4, 256, 512))
    else:
        for n in (256, 512, 1024, 2048, 4096, 8192, 28672):
            for m in (1, 8, 64):
                pts.append((f"sweep_k4096_n{n}", m, 4096, n))
        models = [("mixtral_w13_fused", 4096, 28672), ("mixtral_w2", 14336, 4096),
                  ("mixtral_qkv", 4096, 6144), ("mixtral_router", 4096, 8),
                  ("mixtral_lm_head", 4096, 32000),
                  ("qwen3_w13_fused", 2048, 1536), ("qwen3_w2", 768, 2048),
                  ("qwen3_qkv", 2048, 5120), ("qwen3_o", 4096, 2048), ("k2048_n4096", 2048, 4096),
                  ("qwen3_router", 2048, 128), ("qwen3_lm_head", 2048, 151936)]
        for name, k, n in models:
            for m in (1, 4, 16, 64, 256):
                pts.append((name, m, k, n))
    cur = None
    for name, m, k, n in pts:
        wbytes = 2 * n * k
        copies = max(2, min(2048, math.ceil(rot_target / wbytes)))
        if cur is None or cur[0] != (k, n):
            cur = None
            free_mem()
            Ws = [rnd((n, k), 0.02) for _ in range(copies)]
            cur = ((k, n), Ws)
        Ws = cur[1]
        x = rnd((m, k))
        out = torch.empty(m, n, dtype=BF, device=DEV)
        ms, p10, p90 = bench(lambda r: torch.matmul(x, Ws[r].t(), out=out), copies)
        W({"part": "gemm_ctas", "name": name, "m": m, "k": k, "n": n, "ms": ms, "p10": p10,
           "p90": p90, "copies": copies, "weight_bytes": wbytes,
           "weight_gbps": wbytes / ms / 1e6, "tflops": 2 * m * n * k / ms / 1e9})
        log(f"gemm {name:20s} m={m:4d} k={k:6d} n={n:6d}: {ms * 1e3:8.2f} us "
            f"{wbytes / ms / 1e6:7.0f} GB/s {2 * m * n * k / ms / 1e9:6.1f} TFLOP/s")
    cur = None
    free_mem()


def part_sdpa(W, dry):
    H, hd = (4, 64) if dry else (32, 128)
    rot_target = 16 * MiB if dry else 256 * MiB
    for KVH in ((2, 1) if dry else (8, 4)):
        for B in ((1, 4) if dry else (1, 16, 64)):
            for L in ((64, 256) if dry else (512, 4096, 16384)):
                kvb = 2 * B * KVH * L * hd * 2
                if kvb > 8e9:
                    W({"part": "sdpa", "skipped": "kv > 8 GB", "B": B, "L": L, "KVH": KVH})
                    continue
                copies = max(1, math.ceil(rot_target / kvb))
                q = rnd((B, H, 1, hd))
                ks = [rnd((B, KVH, L, hd)) for _ in range(copies)]
                vs = [rnd((B, KVH, L, hd)) for _ in range(copies)]
                ms, p10, p90 = bench(lambda r: F.scaled_dot_product_attention(
                    q, ks[r % copies], vs[r % copies], enable_gqa=True), max(copies, 4),
                    ctx=sdpa_ctx)
                W({"part": "sdpa", "kind": "decode", "B": B, "H": H, "KVH": KVH, "D": hd, "L": L,
                   "ms": ms, "p10": p10, "p90": p90, "kv_bytes": kvb, "copies": copies,
                   "gbps": kvb / ms / 1e6, "backend": BACKEND})
                log(f"sdpa decode KVH={KVH} B={B:3d} L={L:6d}: {ms * 1e3:8.2f} us "
                    f"{kvb / ms / 1e6:7.0f} GB/s (copies {copies})")
                q = ks = vs = None
                free_mem()
    for KVH in ((2,) if dry else (8, 4)):
        for T in ((16, 64) if dry else (128, 1024, 4096)):
            q = rnd((1, H, T, hd))
            k = rnd((1, KVH, T, hd))
            v = rnd((1, KVH, T, hd))
            ms, p10, p90 = bench(lambda r: F.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=True), 4, ctx=sdpa_ctx)
            fl = 4 * H * T * T * hd / 2
            W({"part": "sdpa", "kind": "prefill_causal", "B": 1, "H": H, "KVH": KVH, "D": hd,
               "T": T, "ms": ms, "p10": p10, "p90": p90, "flops_causal": fl,
               "tflops": fl / ms / 1e9, "backend": BACKEND})
            log(f"sdpa prefill KVH={KVH} T={T:5d}: {ms * 1e3:8.2f} us {fl / ms / 1e9:6.1f} TFLOP/s")
    free_mem()


# ----------------------------------------------------------------------------- main
BACKEND = "default"


def pick_backend():
    global SDPA_CTX, BACKEND
    SDPA_CTX, BACKEND = flash_sdpa(DEV)


PARTS = {"read_ctas": part_read_ctas, "latency": part_latency, "elementwise": part_elementwise,
         "gemm_ctas": part_gemm, "sdpa": part_sdpa}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--dry", action="store_true", help="tiny sizes; CPU allowed")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--budget-s", type=float, default=150.0,
                    help="start no new part after this many seconds")
    args = ap.parse_args()
    if DEV != "cuda" and not args.dry:
        sys.exit("no CUDA device: use --dry for the tiny CPU run")
    here = os.path.dirname(os.path.abspath(__file__))
    if args.out is None:
        args.out = (os.path.join("/tmp", "hwsim_dry", "microbench_dry.jsonl") if args.dry
                    else os.path.join(here, "h200_microbench_extra.jsonl"))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    f = open(args.out, "w")

    def W(obj):
        f.write(json.dumps(obj) + "\n")
        f.flush()

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    pick_backend()
    meta = {"part": "meta", "script": "calibration/measure_microbench.py", "dry": args.dry,
            "torch": torch.__version__, "triton": triton.__version__ if HAVE_TRITON else None,
            "triton_interpret": os.environ.get("TRITON_INTERPRET"), "numpy": np.__version__,
            "python": platform.python_version(), "host": platform.node(),
            "sdpa_backend": BACKEND, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "timing": "CUDA graph of reps, 3 warm-up replays, 10-15 timed replays (CUDA events), "
                      "ms = median replay / reps"}
    if DEV == "cuda":
        p = torch.cuda.get_device_properties(0)
        meta.update(gpu=p.name, sms=p.multi_processor_count,
                    mem_gib=round(p.total_memory / GiB, 1),
                    l2_mb=round(getattr(p, "L2_cache_size", 0) / MiB, 1), cuda=torch.version.cuda,
                    smi=smi_line())
    W(meta)
    log(f"device={DEV} {meta.get('gpu', '')} torch {torch.__version__} triton "
        f"{meta['triton']} (interpret={meta['triton_interpret']}) sdpa={BACKEND}")
    for name in [p for p in args.parts.split(",") if p]:
        if time.perf_counter() - T_START > args.budget_s:
            log(f"SKIP part {name}: time budget spent")
            W({"part": name, "skipped": "time budget"})
            continue
        t0 = time.perf_counter()
        log(f"part {name} ...")
        try:
            PARTS[name](W, args.dry)
        except Exception as e:
            import traceback
            traceback.print_exc()
            log(f"FAIL part {name}: {e!r}")
            W({"part": name, "error": repr(e)[:2000]})
            free_mem()
        log(f"part {name} took {time.perf_counter() - t0:.1f}s")
    if DEV == "cuda":
        W({"part": "meta_end", "smi": smi_line(), "total_s": round(time.perf_counter() - T_START, 1)})
    f.close()
    log(f"done -> {args.out}")


if __name__ == "__main__":
    main()
