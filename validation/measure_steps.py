#!/usr/bin/env python3
"""Measure whole MoE decode steps and prefills on one GPU (validation targets for hwsim).

How to run (on the H200; python3.12, torch 2.11+cu130, numpy; no network needed):

    python3 validation/measure_steps.py --out $OUT/h200_steps.csv
    # smoke test first (tiny shapes, ~30 s on a GPU, also runs on a CPU):
    python3 validation/measure_steps.py --dry
    # verification steps of speculative decoding / MTP (issue 34; predictions written first in
    # validation/spec_grid.md): B sequences x Q query tokens each
    python3 validation/measure_steps.py --spec --out $OUT/h200_spec_steps.csv
    python3 validation/measure_steps.py --spec --dry

Writes the public CSV (`--out`, default validation/h200_steps.csv), one row per measured case:
    name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,notes
and a raw JSONL beside it (same stem + `.jsonl`) with, per case: median/p10/p90 and every replay,
the analytic count of ops (= kernel launches issued by this script, by kind), the CUDA graph's
node count read back from the driver where possible, distinct experts per layer, plus a meta
record (torch/triton versions, GPU, nvidia-smi clocks before and after). Both files are rewritten /
appended after every case, so a timeout loses little. `--budget-s` stops starting new cases.

What is measured: the software schedule of shared/calibration/README.md ("What is measured
elsewhere"), for mixtral-8x7b and qwen3-30b-a3b, with random bf16 weights (randn * 0.02):
  per layer: RMSNorm; fused QKV GEMM; [Qwen3: RMSNorm over head_dim on q and on k (QK-norm)];
  two copies of the new K and V into the cache slot at index `context`; SDPA over the whole
  context (flash backend forced when available, GQA via enable_gqa=True, q [B,H,1,hd],
  k/v [B,KVH,L+1,hd]); output-projection GEMM; residual add; RMSNorm; router GEMM [d -> E];
  softmax over experts (fp32 out); zero the MoE output buffer; then for every expert chosen by
  at least one token, in expert order: index_select of its tokens, one GEMM for gate+up
  ([2*ff, d]), SiLU on the gate half, multiply by the up half, down GEMM, scale by the router
  weight, index_add_ back; residual add. After the last layer: RMSNorm and the LM-head GEMM.
  Prefill: the same per layer for one prompt of T tokens, causal SDPA over the prompt, no KV
  cache (no cache copies), the attention output viewed back as [T, H*hd] for the o-projection
  (a copy only if SDPA returned it in a layout that needs one; counted then), and final
  RMSNorm + LM head on the last token only.
  Routing is fixed per case: each token gets k distinct experts drawn uniformly with a seeded
  torch generator, and fixed random router weights (normalised over its k); the in-graph router
  GEMM + softmax run but their result is not used to route (as the README prescribes).
  No RoPE, no embedding lookup (the step starts from a random bf16 hidden state).
Timing: `graph` = the whole step captured as one CUDA graph (eager warm-up on a side stream
first), 3 warm-up replays, then each of N replays timed with CUDA events; median, p10, p90.
`eager` = the same Python code launching every kernel, each step timed with CUDA events from an
idle GPU (host-bound), median of 10 after 3 warm-up steps.
"""
import argparse
import csv
import gc
import json
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "calibration"))
from device_env import (T_START, NullContext, flash_sdpa, log, smi_line, time_replays,  # noqa: E402
                        triton_version)


# ----------------------------------------------------------------------------- models
MODELS = {
    "mixtral-8x7b": dict(L=32, d=4096, H=32, KVH=8, hd=128, vocab=32000, E=8, k=2, ff=14336,
                         qk_norm=False, eps=1e-5),
    "qwen3-30b-a3b": dict(L=48, d=2048, H=32, KVH=4, hd=128, vocab=151936, E=128, k=8, ff=768,
                          qk_norm=True, eps=1e-6),
}
# --dry: same structure, tiny shapes
DRY_MODELS = {
    "mixtral-8x7b": dict(L=2, d=256, H=4, KVH=2, hd=64, vocab=512, E=8, k=2, ff=512,
                         qk_norm=False, eps=1e-5),
    "qwen3-30b-a3b": dict(L=2, d=256, H=4, KVH=2, hd=64, vocab=1000, E=16, k=4, ff=128,
                          qk_norm=True, eps=1e-6),
}


# --extra: a second grid measured after the calibration was set, never used to set it (a test)
EXTRA_CASES = {
    "mixtral-8x7b": [("decode", "graph", 2, 2048, 0), ("decode", "graph", 8, 8192, 0),
                     ("decode", "graph", 32, 2048, 0), ("decode", "graph", 1, 32768, 0),
                     ("decode", "graph", 64, 16384, 0), ("decode", "graph", 32, 32768, 0),
                     ("prefill", "graph", 1, 0, 512), ("prefill", "graph", 1, 0, 2048)],
    "qwen3-30b-a3b": [("decode", "graph", 2, 2048, 0), ("decode", "graph", 16, 8192, 0),
                      ("decode", "graph", 64, 2048, 0), ("decode", "graph", 4, 32768, 0),
                      ("decode", "graph", 64, 16384, 0), ("decode", "graph", 1, 32768, 0),
                      ("prefill", "graph", 1, 0, 512), ("prefill", "graph", 1, 0, 2048)],
}


# --sdpa-default: steps whose decode attention PyTorch runs on cuDNN (hwsim's
# runtime.attention_kernel: cudnn), where it differs most from flash: batch >= 32
CUDNN_CASES = {
    "mixtral-8x7b": [("decode", "graph", 1, 4096, 0), ("decode", "graph", 16, 16384, 0),
                     ("decode", "graph", 64, 4096, 0), ("decode", "graph", 32, 8192, 0)],
    "qwen3-30b-a3b": [("decode", "graph", 8, 4096, 0), ("decode", "graph", 32, 4096, 0),
                      ("decode", "graph", 128, 4096, 0), ("decode", "graph", 64, 8192, 0)],
}


# --spec: verification steps (issue 34): ("verify", launch, batch, context, Q query tokens per
# sequence): K = Q - 1 drafted tokens and the sequence's own, one pass (validation/spec_grid.md)
SPEC_CASES = {
    "mixtral-8x7b": [("verify", "graph", b, 4096, q) for b in (1, 8) for q in (2, 4, 8)],
    "qwen3-30b-a3b": [("verify", "graph", b, 4096, q) for b in (1, 8) for q in (2, 4, 8)],
}
DRY_SPEC_CASES = [("verify", "graph", 1, 16, 2), ("verify", "graph", 2, 64, 4)]


def cases_for(model, dry, extra=False, spec=False):
    """(phase, launch, batch, context, prompt) in run order; the largest come last in each group
    (verify: the last is the query tokens per sequence, not a prompt)."""
    if spec:
        return DRY_SPEC_CASES if dry else SPEC_CASES[model]
    if extra and not dry:
        return EXTRA_CASES[model]
    c = []
    if dry:
        c += [("decode", "graph", 1, 16, 0), ("decode", "graph", 4, 64, 0),
              ("prefill", "graph", 1, 0, 8), ("prefill", "graph", 1, 0, 32),
              ("decode", "eager", 1, 16, 0)]
        return c
    if model == "mixtral-8x7b":
        for b in (1, 4, 16, 64):
            for l in (512, 4096):
                c.append(("decode", "graph", b, l, 0))
        c += [("prefill", "graph", 1, 0, 128), ("prefill", "graph", 1, 0, 1024),
              ("decode", "eager", 1, 512, 0), ("decode", "eager", 16, 4096, 0),
              ("decode", "graph", 1, 16384, 0), ("decode", "graph", 16, 16384, 0)]
    else:
        for b in (1, 8, 32, 128):
            for l in (512, 4096):
                c.append(("decode", "graph", b, l, 0))
        c += [("prefill", "graph", 1, 0, 128), ("prefill", "graph", 1, 0, 1024),
              ("decode", "eager", 8, 512, 0)]
    return c


def case_name(model, phase, b, ctx, prompt, launch):
    if phase == "verify":
        return f"{model}-verify-b{b}-q{prompt}-l{ctx}-{launch}"
    if phase == "decode":
        return f"{model}-decode-b{b}-l{ctx}-{launch}"
    return f"{model}-prefill-t{prompt}-{launch}"


# ----------------------------------------------------------------------------- op counting
class Counter:
    """Every op this script issues on the device increments `n` (and `by_kind`)."""

    def __init__(self):
        self.n = 0
        self.by_kind = {}

    def __call__(self, kind, k=1):
        self.n += k
        self.by_kind[kind] = self.by_kind.get(kind, 0) + k

    def reset(self):
        self.n = 0
        self.by_kind = {}


OPS = Counter()
HAVE_RMS = hasattr(F, "rms_norm")
RMS_IMPL = "torch.nn.functional.rms_norm (bf16 in/out, weight bf16)" if HAVE_RMS else \
    "hand-written: x.float()*rsqrt(mean(x^2)+eps) -> bf16 * w"


def rms(x, w, eps):
    OPS("rmsnorm")
    if HAVE_RMS:
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def mm(x, w):
    """x [m, k] @ w[n, k]^T (cuBLAS through torch.matmul, as in the calibration GEMMs)."""
    OPS("gemm")
    return torch.matmul(x, w.t())


SDPA_CTX = None  # set in main: a context manager factory forcing the flash backend, or None


def to_rows(t, rows):
    """[rows, H, hd] view -> [rows, H*hd]; counts a copy kernel only when reshape must copy
    (flash returns its output in [B, T, H, hd] memory, so usually this is a free view)."""
    if not t.is_contiguous():
        OPS("attn_out_copy")
    return t.reshape(rows, -1)


def sdpa(q, k, v, causal):
    OPS("sdpa")
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


# ----------------------------------------------------------------------------- weights/state
def randn(shape, dev, gen, scale=0.02):
    t = torch.randn(shape, dtype=torch.bfloat16, device=dev, generator=gen)
    return t.mul_(scale)


class Weights:
    def __init__(self, cfg, dev, seed=0):
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        d, H, KVH, hd, E, ff = cfg["d"], cfg["H"], cfg["KVH"], cfg["hd"], cfg["E"], cfg["ff"]
        self.layers = []
        for _ in range(cfg["L"]):
            lw = dict(
                ln1=1.0 + randn((d,), dev, g),
                wqkv=randn(((H + 2 * KVH) * hd, d), dev, g),
                wo=randn((d, H * hd), dev, g),
                ln2=1.0 + randn((d,), dev, g),
                wr=randn((E, d), dev, g),
                w13=randn((E, 2 * ff, d), dev, g),  # per expert [2*ff, d]: gate rows, then up rows
                w2=randn((E, d, ff), dev, g),
            )
            if cfg["qk_norm"]:
                lw["qn"] = 1.0 + randn((hd,), dev, g)
                lw["kn"] = 1.0 + randn((hd,), dev, g)
            self.layers.append(lw)
        self.lnf = 1.0 + randn((d,), dev, g)
        self.lm = randn((cfg["vocab"], d), dev, g)

    def nbytes(self):
        n = self.lnf.numel() + self.lm.numel()
        for lw in self.layers:
            n += sum(t.numel() for t in lw.values())
        return 2 * n


def make_routing(cfg, ntok, dev, seed):
    """Per layer: list of (expert, token_idx int64 [n_e], weight bf16 [n_e, 1]) in expert order."""
    g = torch.Generator()
    g.manual_seed(seed)
    E, k = cfg["E"], cfg["k"]
    routes = []
    for _ in range(cfg["L"]):
        choice = torch.rand(ntok, E, generator=g).argsort(dim=1)[:, :k]  # k distinct experts/token
        wts = torch.rand(ntok, k, generator=g) + 0.05
        wts = wts / wts.sum(1, keepdim=True)
        lay = []
        for e in range(E):
            hit = choice == e  # [ntok, k], at most one True per row
            rows = hit.any(1).nonzero().flatten()
            if rows.numel() == 0:
                continue
            w = (wts * hit).sum(1)[rows]
            lay.append((e, rows.to(dev), w.to(torch.bfloat16).view(-1, 1).to(dev)))
        routes.append(lay)
    return routes


def kv_bytes(cfg, b, ctx):
    return cfg["L"] * 2 * b * cfg["KVH"] * (ctx + 1) * cfg["hd"] * 2


def make_cache(cfg, b, ctx, dev, seed=1):
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    return [randn((2, b, cfg["KVH"], ctx + 1, cfg["hd"]), dev, g, scale=1.0)
            for _ in range(cfg["L"])]


# ----------------------------------------------------------------------------- the schedule
def moe(x, h, lw, route, cfg):
    """Router GEMM + softmax, expert loop, residual add. Returns new residual stream."""
    ff = cfg["ff"]
    logits = mm(h, lw["wr"])
    OPS("softmax")
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)  # noqa: F841 (routing is fixed)
    OPS("zero")
    y = torch.zeros_like(x)
    for e, idx, w in route:
        OPS("index_select")
        xe = h.index_select(0, idx)
        gu = mm(xe, lw["w13"][e])
        OPS("silu")
        a = F.silu(gu[:, :ff])
        OPS("mul")
        a = a * gu[:, ff:]
        z = mm(a, lw["w2"][e])
        OPS("scale")
        z = z * w
        OPS("index_add")
        y.index_add_(0, idx, z)
    OPS("add")
    return x + y


def decode_step(W, cfg, st):
    B, ctx = st["B"], st["ctx"]
    H, KVH, hd, eps = cfg["H"], cfg["KVH"], cfg["hd"], cfg["eps"]
    x = st["x"]
    for li, lw in enumerate(W.layers):
        h = rms(x, lw["ln1"], eps)
        qkv = mm(h, lw["wqkv"])
        q = qkv[:, :H * hd].view(B, H, hd)
        k = qkv[:, H * hd:(H + KVH) * hd].view(B, KVH, hd)
        v = qkv[:, (H + KVH) * hd:].view(B, KVH, hd)
        if cfg["qk_norm"]:
            q = rms(q, lw["qn"], eps)
            k = rms(k, lw["kn"], eps)
        kc, vc = st["cache"][li][0], st["cache"][li][1]  # [B, KVH, ctx+1, hd]
        OPS("kv_copy", 2)
        kc[:, :, ctx].copy_(k)
        vc[:, :, ctx].copy_(v)
        a = sdpa(q.unsqueeze(2), kc, vc, causal=False)  # [B, H, 1, hd]
        o = mm(to_rows(a.transpose(1, 2)[:, 0], B), lw["wo"])
        OPS("add")
        x = x + o
        h = rms(x, lw["ln2"], eps)
        x = moe(x, h, lw, st["route"][li], cfg)
    h = rms(x, W.lnf, eps)
    return mm(h, W.lm)


def verify_step(W, cfg, st):
    """A speculative verification step: decode_step with Q query tokens per sequence (B Q rows
    through every GEMM and expert; Q new K and V rows per sequence copied into the cache at
    ctx..ctx+Q-1; SDPA of q [B, H, Q, hd] over the whole cache, not causal among the Q: the
    K rows it would mask are Q-1 of ctx+Q; the LM head over every row)."""
    B, ctx, Q = st["B"], st["ctx"], st["Q"]
    H, KVH, hd, eps = cfg["H"], cfg["KVH"], cfg["hd"], cfg["eps"]
    x = st["x"]
    for li, lw in enumerate(W.layers):
        h = rms(x, lw["ln1"], eps)
        qkv = mm(h, lw["wqkv"])
        q = qkv[:, :H * hd].view(B, Q, H, hd)
        k = qkv[:, H * hd:(H + KVH) * hd].view(B, Q, KVH, hd)
        v = qkv[:, (H + KVH) * hd:].view(B, Q, KVH, hd)
        if cfg["qk_norm"]:
            q = rms(q, lw["qn"], eps)
            k = rms(k, lw["kn"], eps)
        kc, vc = st["cache"][li][0], st["cache"][li][1]  # [B, KVH, ctx+Q, hd]
        OPS("kv_copy", 2)
        kc[:, :, ctx:ctx + Q].copy_(k.transpose(1, 2))
        vc[:, :, ctx:ctx + Q].copy_(v.transpose(1, 2))
        a = sdpa(q.transpose(1, 2), kc, vc, causal=False)  # [B, H, Q, hd]
        o = mm(to_rows(a.transpose(1, 2).reshape(B * Q, H, hd), B * Q), lw["wo"])
        OPS("add")
        x = x + o
        h = rms(x, lw["ln2"], eps)
        x = moe(x, h, lw, st["route"][li], cfg)
    h = rms(x, W.lnf, eps)
    return mm(h, W.lm)


def prefill_step(W, cfg, st):
    T = st["T"]
    H, KVH, hd, eps = cfg["H"], cfg["KVH"], cfg["hd"], cfg["eps"]
    x = st["x"]
    for li, lw in enumerate(W.layers):
        h = rms(x, lw["ln1"], eps)
        qkv = mm(h, lw["wqkv"])
        q = qkv[:, :H * hd].view(T, H, hd)
        k = qkv[:, H * hd:(H + KVH) * hd].view(T, KVH, hd)
        v = qkv[:, (H + KVH) * hd:].view(T, KVH, hd)
        if cfg["qk_norm"]:
            q = rms(q, lw["qn"], eps)
            k = rms(k, lw["kn"], eps)
        a = sdpa(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                 v.transpose(0, 1).unsqueeze(0), causal=True)  # [1, H, T, hd]
        o = mm(to_rows(a[0].transpose(0, 1), T), lw["wo"])
        OPS("add")
        x = x + o
        h = rms(x, lw["ln2"], eps)
        x = moe(x, h, lw, st["route"][li], cfg)
    h = rms(x[-1:], W.lnf, eps)
    return mm(h, W.lm)


# ----------------------------------------------------------------------------- timing
def pct(xs):
    a = np.asarray(xs, dtype=float)
    return float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90))


def new_graph():
    try:
        return torch.cuda.CUDAGraph(keep_graph=True), True
    except TypeError:
        return torch.cuda.CUDAGraph(), False


def graph_nodes(g, kept):
    """Node count of the captured graph (total, kernel nodes) via the driver API; None if unavailable."""
    if not kept:
        return None
    try:
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        raw = ctypes.c_void_p(g.raw_cuda_graph())
        n = ctypes.c_size_t(0)
        if lib.cuGraphGetNodes(raw, None, ctypes.byref(n)) != 0:
            return None
        arr = (ctypes.c_void_p * n.value)()
        if lib.cuGraphGetNodes(raw, arr, ctypes.byref(n)) != 0:
            return {"total": n.value}
        kinds = {}
        t = ctypes.c_int(0)
        names = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty",
                 6: "wait_event", 7: "event_record", 10: "mem_alloc", 11: "mem_free"}
        for i in range(n.value):
            if lib.cuGraphNodeGetType(ctypes.c_void_p(arr[i]), ctypes.byref(t)) == 0:
                key = names.get(t.value, str(t.value))
                kinds[key] = kinds.get(key, 0) + 1
        return {"total": n.value, **kinds}
    except Exception as e:  # best effort only
        return {"error": repr(e)[:200]}


def run_ctx():
    return SDPA_CTX() if SDPA_CTX is not None else NullContext()


def time_graph(fn, replays, warm_eager=2, warm_replays=3):
    info = {}
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    t0 = time.perf_counter()
    with torch.cuda.stream(s), run_ctx():
        for _ in range(warm_eager):
            OPS.reset()
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    info["eager_warmup_s"] = (time.perf_counter() - t0) / warm_eager
    g, kept = new_graph()
    t0 = time.perf_counter()
    OPS.reset()
    with torch.cuda.graph(g), run_ctx():
        out = fn()
    info["ops"] = OPS.n
    info["ops_by_kind"] = dict(OPS.by_kind)
    if kept:
        g.instantiate()
    torch.cuda.synchronize()
    info["capture_s"] = time.perf_counter() - t0
    info["graph_nodes"] = graph_nodes(g, kept)
    ms = time_replays(g, replays, warm_replays)
    info["finite"] = bool(torch.isfinite(out.float()).all().item())
    del g, out
    return ms, info


def time_eager(fn, steps, warm=3):
    info = {}
    with run_ctx():
        for _ in range(warm):
            OPS.reset()
            fn()
        torch.cuda.synchronize()
        info["ops"] = OPS.n
        info["ops_by_kind"] = dict(OPS.by_kind)
        ms, wall = [], []
        for _ in range(steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            a.record()
            out = fn()
            b.record()
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - t0) * 1e3)
            ms.append(a.elapsed_time(b))
    info["host_wall_ms"] = wall
    info["finite"] = bool(torch.isfinite(out.float()).all().item())
    return ms, info


def time_cpu(fn, steps, warm=1):
    """--dry on a machine without CUDA: plain wall time (no graphs, no events)."""
    info = {}
    with run_ctx():
        for _ in range(warm):
            OPS.reset()
            out = fn()
        info["ops"] = OPS.n
        info["ops_by_kind"] = dict(OPS.by_kind)
        ms = []
        for _ in range(steps):
            t0 = time.perf_counter()
            out = fn()
            ms.append((time.perf_counter() - t0) * 1e3)
    info["finite"] = bool(torch.isfinite(out.float()).all().item())
    return ms, info


# ----------------------------------------------------------------------------- env info
def pick_sdpa_backend(dev):
    """Force the flash backend (as the README's schedule says) if it accepts our shapes."""
    global SDPA_CTX
    SDPA_CTX, description = flash_sdpa(dev)
    return description


# ----------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="CSV path (JSONL written beside it)")
    ap.add_argument("--dry", action="store_true", help="tiny shapes; CPU allowed")
    ap.add_argument("--models", default="mixtral-8x7b,qwen3-30b-a3b")
    ap.add_argument("--only", default=None, help="substring filter on case names")
    ap.add_argument("--extra", action="store_true", help="the second grid (EXTRA_CASES), a test set")
    ap.add_argument("--sdpa-default", action="store_true",
                    help="leave SDPA's backend to PyTorch (cuDNN on the H200) instead of forcing flash; "
                         "runs the CUDNN_CASES")
    ap.add_argument("--replays", type=int, default=15, help="timed graph replays per case")
    ap.add_argument("--eager-steps", type=int, default=10)
    ap.add_argument("--max-kv-gb", type=float, default=35.0,
                    help="skip a case whose KV cache exceeds this many GB (1e9 bytes)")
    ap.add_argument("--budget-s", type=float, default=270.0,
                    help="start no new case after this many seconds (first model gets 55%%)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spec", action="store_true",
                    help="verification steps of Q query tokens per sequence (SPEC_CASES, issue 34)")
    args = ap.parse_args()

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.dry and dev != "cuda":
        sys.exit("no CUDA device: use --dry for the tiny CPU run")
    here = os.path.dirname(os.path.abspath(__file__))
    if args.out is None:
        args.out = (os.path.join("/tmp", "hwsim_dry", "steps_dry.csv") if args.dry
                    else os.path.join(here, "h200_steps.csv"))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    jpath = os.path.splitext(args.out)[0] + ".jsonl"
    hardware = "h200-sxm" if not args.dry else f"dry-{dev}"
    models = MODELS if not args.dry else DRY_MODELS

    torch.backends.cuda.matmul.allow_tf32 = False
    backend = pick_sdpa_backend(dev) if not args.sdpa_default else "default selection (cuDNN on the H200)"
    meta = {"part": "meta", "script": "validation/measure_steps.py", "dry": args.dry,
            "torch": torch.__version__, "triton": triton_version(), "numpy": np.__version__,
            "python": platform.python_version(), "host": platform.node(),
            "cpu": platform.processor(), "rmsnorm_impl": RMS_IMPL, "sdpa_backend": backend,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "argv": sys.argv[1:],
            "replays": args.replays, "warm_replays": 3, "eager_warmup_steps_before_capture": 2}
    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        meta.update(gpu=p.name, sms=p.multi_processor_count,
                    mem_gib=round(p.total_memory / 2 ** 30, 1),
                    l2_mb=round(getattr(p, "L2_cache_size", 0) / 2 ** 20, 1),
                    cuda=torch.version.cuda, smi_before=smi_line())
    log(f"device={dev} {meta.get('gpu', '')}  torch {torch.__version__}  rmsnorm: {RMS_IMPL}  "
        f"sdpa: {backend}")
    jf = open(jpath, "w")

    def jwrite(obj):
        jf.write(json.dumps(obj) + "\n")
        jf.flush()

    jwrite(meta)
    rows = []
    fields = ["name", "hardware", "model", "phase", "batch", "context_tokens", "prompt_tokens",
              "kv_bits", "launch", "measured_ms", "notes"]

    def write_csv():
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)

    write_csv()
    mlist = [m for m in args.models.split(",") if m]
    for mi, model in enumerate(mlist):
        cfg = models[model]
        deadline = args.budget_s * (0.55 if (mi == 0 and len(mlist) > 1) else 1.0)
        cases = [c for c in (CUDNN_CASES[model] if args.sdpa_default and not args.dry
                             else cases_for(model, args.dry, args.extra, args.spec))
                 if args.only is None or args.only in case_name(model, c[0], c[2], c[3], c[4], c[1])]
        if not cases:
            continue
        if time.perf_counter() - T_START > deadline:
            log(f"budget: skipping model {model}")
            for c in cases:
                jwrite({"part": "skipped", "name": case_name(model, c[0], c[2], c[3], c[4], c[1]),
                        "reason": "time budget"})
            continue
        t0 = time.perf_counter()
        W = Weights(cfg, dev, seed=args.seed)
        if dev == "cuda":
            torch.cuda.synchronize()
        log(f"{model}: weights {W.nbytes() / 1e9:.1f} GB allocated in {time.perf_counter() - t0:.1f}s")
        for phase, launch, b, ctx, prompt in cases:
            name = case_name(model, phase, b, ctx, prompt, launch)
            if time.perf_counter() - T_START > deadline:
                log(f"SKIP {name}: time budget ({deadline:.0f}s) spent")
                jwrite({"part": "skipped", "name": name, "reason": "time budget"})
                continue
            queries = prompt if phase == "verify" else 1
            ntok = b * queries if phase in ("decode", "verify") else prompt
            kvb = kv_bytes(cfg, b, ctx + queries - 1) if phase in ("decode", "verify") else 0
            if kvb > args.max_kv_gb * 1e9:
                log(f"SKIP {name}: KV cache {kvb / 1e9:.1f} GB > --max-kv-gb {args.max_kv_gb}")
                jwrite({"part": "skipped", "name": name, "kv_bytes": kvb,
                        "reason": f"KV {kvb / 1e9:.1f} GB > max {args.max_kv_gb} GB"})
                continue
            if dev == "cuda":
                free, _ = torch.cuda.mem_get_info()
                if kvb + 6 * 2 ** 30 > free:
                    log(f"SKIP {name}: KV {kvb / 1e9:.1f} GB does not fit ({free / 1e9:.1f} GB free)")
                    jwrite({"part": "skipped", "name": name, "kv_bytes": kvb,
                            "reason": f"memory: {free / 1e9:.1f} GB free"})
                    continue
            tc = time.perf_counter()
            st = None
            try:
                g = torch.Generator(device=dev)
                g.manual_seed(args.seed + 7)
                st = {"B": b, "ctx": ctx, "T": prompt,
                      "x": torch.randn((ntok, cfg["d"]), dtype=torch.bfloat16, device=dev,
                                       generator=g),
                      "route": make_routing(cfg, ntok, dev, seed=args.seed + 1000 + ntok)}
                if phase == "verify":
                    st["Q"] = queries
                    st["cache"] = make_cache(cfg, b, ctx + queries - 1, dev)
                    fn = lambda: verify_step(W, cfg, st)  # noqa: E731
                elif phase == "decode":
                    st["cache"] = make_cache(cfg, b, ctx, dev)
                    fn = lambda: decode_step(W, cfg, st)  # noqa: E731
                else:
                    fn = lambda: prefill_step(W, cfg, st)  # noqa: E731
                if dev != "cuda":
                    ms, info = time_cpu(fn, 3)
                    info["note"] = "CPU dry run: wall time, no graph"
                elif launch == "graph":
                    ms, info = time_graph(fn, args.replays)
                else:
                    ms, info = time_eager(fn, args.eager_steps)
            except Exception as e:
                log(f"FAIL {name}: {e!r}")
                jwrite({"part": "error", "name": name, "error": repr(e)[:2000]})
                st = None
                gc.collect()
                if dev == "cuda":
                    torch.cuda.empty_cache()
                continue
            med, p10, p90 = pct(ms)
            nexp = [len(r) for r in st["route"]]
            rec = {"part": "step", "name": name, "model": model, "phase": phase, "batch": b if
                   phase != "prefill" else 1, "context_tokens": ctx, "prompt_tokens": prompt,
                   "queries": queries,
                   "launch": launch, "ms": med, "p10": p10, "p90": p90, "replays_ms": ms,
                   "n_replays": len(ms), "kv_bytes": kvb, "weight_bytes": W.nbytes(),
                   "experts_per_layer": nexp, "experts_per_layer_mean": float(np.mean(nexp)),
                   "case_wall_s": round(time.perf_counter() - tc, 2),
                   "kernels_analytic": info["ops"], **info}
            if dev == "cuda":
                rec["smi_after"] = smi_line() if launch == "graph" and b >= 16 else None
            jwrite(rec)
            notes = [f"{launch} median of {len(ms)} (p10 {p10:.3f} p90 {p90:.3f} ms)",
                     f"rmsnorm={'F.rms_norm' if HAVE_RMS else 'manual'}",
                     f"sdpa={'flash' if SDPA_CTX else 'default'}",
                     f"experts/layer mean {np.mean(nexp):.1f}",
                     f"ops {info['ops']}",
                     "fixed uniform top-k routing", "no RoPE"]
            if cfg["qk_norm"]:
                notes.append("QK-norm (RMSNorm over head_dim on q and k)")
            if phase == "prefill":
                notes.append("causal SDPA over prompt; no KV cache; LM head last token only")
            if phase == "verify":
                notes.append(f"queries={queries} per sequence; SDPA not causal among them; LM head every row")
            if args.dry:
                notes.append("DRY tiny shapes")
            rows.append({"name": name, "hardware": hardware, "model": model, "phase": phase,
                         "batch": b if phase != "prefill" else 1,
                         "context_tokens": ctx if phase != "prefill" else 0,
                         "prompt_tokens": prompt if phase == "prefill" else 0, "kv_bits": 16,
                         "launch": launch, "measured_ms": f"{med:.4f}", "notes": "; ".join(notes)})
            write_csv()
            log(f"{name}: {med:.3f} ms (p10 {p10:.3f}, p90 {p90:.3f}) ops={info['ops']} "
                f"experts/layer={np.mean(nexp):.1f} case {time.perf_counter() - tc:.1f}s")
            st = None
            gc.collect()
            if dev == "cuda":
                torch.cuda.empty_cache()
        W = None
        gc.collect()
        if dev == "cuda":
            torch.cuda.empty_cache()
    if dev == "cuda":
        jwrite({"part": "meta_end", "smi_after": smi_line(),
                "total_s": round(time.perf_counter() - T_START, 1)})
    jf.close()
    log(f"done: {len(rows)} rows -> {args.out} and {jpath}")


if __name__ == "__main__":
    main()
