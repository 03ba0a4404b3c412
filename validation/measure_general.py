#!/usr/bin/env python3
"""Measure whole steps of models and points never measured before (issue 17: does accuracy
generalise?). The grid and its held-out half are fixed below and in validation/general_grid.md
BEFORE anything is measured or calibrated on them.

    python3 validation/measure_general.py --out $OUT/h200_general.csv [--models a,b] [--budget-s 560]
    python3 validation/measure_general.py --dry          # tiny shapes, CPU allowed

Same timing, routing and output format as validation/measure_steps.py (graph replay, median of
15, fixed uniform top-k routing, no RoPE, random bf16 weights); the CSV gains a `split` column
(`cal`: may be looked at to find mechanisms; `test`: never used to set anything).

The schedule is measure_steps.py's per-expert PyTorch loop, generalised by the model's config:
- GQA attention with optional per-head QK-norm (OLMoE's norms are over all heads in the real
  model; here per head, as hwsim's `qk_norm` is), flash SDPA forced; a sliding window (gpt-oss
  even layers: decode attends over the last `window` cached tokens; prefill keeps the causal mask
  over the whole prompt, since flash SDPA has no window argument);
- MLA (DeepSeek-V2-Lite), as DeepSeek's reference inference/model.py runs it without FlashMLA:
  decode 'absorb': q GEMM; kv_a GEMM; RMSNorm of the latent; latent and rope key written to their
  caches (2 copies); q_nope absorbed into the latent space by a batched matmul with kv_b's key half;
  scores = q_lat . latent + q_pe . k_pe (two batched matmuls, add), times the scale; softmax (fp32);
  probs . latent (batched matmul); out absorbed by kv_b's value half (batched matmul); o GEMM.
  Prefill 'naive': q GEMM; kv_a GEMM; RMSNorm; kv_b GEMM decompresses K-nope and V for every
  token; K = [K-nope, k_pe broadcast over heads] (a cat); V padded with zeros to the query-key dim
  (as vLLM does for flash); causal flash SDPA; the V part of the output sliced out for the o GEMM;
- dense layers (Llama-3.1-8B, DeepSeek-V2-Lite's first layer): gate+up GEMM, SiLU, mul, down GEMM;
- shared experts (one MLP of shared_experts x shared_ffn, as DeepSeek's and Qwen's code build it),
  computed before the routed experts from the same normed input and added to the residual stream
  (one add); Qwen1.5-MoE scales it by sigmoid(h . w_gate) first (a [d -> 1] GEMM, sigmoid, multiply).
No biases (Qwen1.5's QKV bias, gpt-oss's), no attention sinks, gpt-oss's clamped SwiGLU is a plain
SwiGLU: each is a small elementwise difference that the real models have and these steps do not.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "calibration"))
import measure_steps as base  # noqa: E402  (its timing, routing and op counting)
from measure_steps import OPS, mm, rms, sdpa, randn, to_rows  # noqa: E402
from device_env import T_START, log, smi_line, triton_version  # noqa: E402

# ----------------------------------------------------------------------------- models
# config.json numbers (hwsim/data/models/*.yaml); E = 0 means a dense model
MODELS = {
    "mixtral-8x7b": dict(L=32, d=4096, H=32, KVH=8, hd=128, vocab=32000, E=8, k=2, ff=14336, eps=1e-5),
    "qwen3-30b-a3b": dict(L=48, d=2048, H=32, KVH=4, hd=128, vocab=151936, E=128, k=8, ff=768,
                          qk_norm=True, eps=1e-6),
    "olmoe-1b-7b": dict(L=16, d=2048, H=16, KVH=16, hd=128, vocab=50304, E=64, k=8, ff=1024,
                        qk_norm=True, eps=1e-5),
    "qwen1.5-moe-a2.7b": dict(L=24, d=2048, H=16, KVH=16, hd=128, vocab=151936, E=60, k=4, ff=1408,
                              shared_ff=5632, shared_gate=True, eps=1e-6),
    "deepseek-v2-lite": dict(L=27, d=2048, H=16, vocab=102400, E=64, k=6, ff=1408, shared_ff=2 * 1408,
                             dense_layers=1, dense_ff=10944, eps=1e-6,
                             mla=dict(kv_lora=512, nope=128, rope=64, v=128)),
    "llama-3.1-8b": dict(L=32, d=4096, H=32, KVH=8, hd=128, vocab=128256, E=0, k=0, ff=0,
                         dense_layers=32, dense_ff=14336, eps=1e-5),
    "gpt-oss-20b": dict(L=24, d=2880, H=64, KVH=8, hd=64, vocab=201088, E=32, k=4, ff=2880,
                        window=128, eps=1e-5),
}
DRY_MODELS = {
    "mixtral-8x7b": dict(L=2, d=256, H=4, KVH=2, hd=64, vocab=512, E=8, k=2, ff=512, eps=1e-5),
    "qwen3-30b-a3b": dict(L=2, d=256, H=4, KVH=2, hd=64, vocab=1000, E=16, k=4, ff=128, qk_norm=True, eps=1e-6),
    "olmoe-1b-7b": dict(L=2, d=256, H=4, KVH=4, hd=64, vocab=512, E=16, k=4, ff=128, qk_norm=True, eps=1e-5),
    "qwen1.5-moe-a2.7b": dict(L=2, d=256, H=4, KVH=4, hd=64, vocab=512, E=12, k=2, ff=128, shared_ff=256,
                              shared_gate=True, eps=1e-6),
    "deepseek-v2-lite": dict(L=3, d=256, H=4, vocab=512, E=16, k=4, ff=128, shared_ff=256, dense_layers=1,
                             dense_ff=512, eps=1e-6, mla=dict(kv_lora=64, nope=32, rope=16, v=32)),
    "llama-3.1-8b": dict(L=2, d=256, H=4, KVH=2, hd=64, vocab=512, E=0, k=0, ff=0, dense_layers=2,
                         dense_ff=512, eps=1e-5),
    "gpt-oss-20b": dict(L=2, d=256, H=8, KVH=2, hd=32, vocab=512, E=8, k=2, ff=256, window=8, eps=1e-5),
}

# ----------------------------------------------------------------------------- the grid
# (phase, batch, context, prompt); within a model, cases alternate cal/test in this order
# (index 0 cal, 1 test, 2 cal, ...): half the rows are a test set no calibration looks at.
# Points already in validation/data/h200_steps*.csv are not repeated.
D, P = "decode", "prefill"
NEW_MODEL_CASES = [(D, 1, 512, 0), (D, 8, 2048, 0), (D, 32, 4096, 0), (D, 128, 1024, 0),
                   (D, 4, 32768, 0), (P, 1, 0, 64), (P, 1, 0, 512), (P, 1, 0, 4096)]
CASES = {
    "mixtral-8x7b": [(D, 2, 512, 0), (D, 128, 512, 0), (D, 256, 512, 0), (D, 128, 1024, 0),
                     (D, 1, 131072, 0), (D, 4, 65536, 0), (D, 8, 32768, 0), (P, 1, 0, 32),
                     (P, 1, 0, 256), (P, 1, 0, 4096), (P, 1, 0, 8192), (D, 2, 16384, 0)],
    "qwen3-30b-a3b": [(D, 2, 512, 0), (D, 256, 512, 0), (D, 256, 1024, 0), (D, 128, 2048, 0),
                      (D, 1, 131072, 0), (D, 4, 65536, 0), (D, 16, 16384, 0), (P, 1, 0, 32),
                      (P, 1, 0, 256), (P, 1, 0, 4096), (P, 1, 0, 8192), (D, 2, 16384, 0)],
    **{m: NEW_MODEL_CASES for m in ("olmoe-1b-7b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite",
                                    "llama-3.1-8b", "gpt-oss-20b")},
}
DRY_CASES = [(D, 1, 16, 0), (D, 4, 64, 0), (P, 1, 0, 8), (P, 1, 0, 32)]
# `--grid fresh`: a third grid, written down (validation/general_grid.md) after session 8's
# one-wave GEMM tiles were set and before these points were measured: every row is `fresh`,
# a test of that change on mid-size prefills and batch-48 decodes nobody had looked at
FRESH_CASES = {
    **{m: [(P, 1, 0, 1536), (D, 48, 2048, 0)] for m in ("mixtral-8x7b", "qwen3-30b-a3b")},
    **{m: [(P, 1, 0, 2048), (D, 48, 8192, 0)] for m in ("olmoe-1b-7b", "qwen1.5-moe-a2.7b",
                                                        "llama-3.1-8b", "gpt-oss-20b")},
    "deepseek-v2-lite": [(P, 1, 0, 2048), (P, 1, 0, 1024)],
}


def split_of(index, grid="general"):
    if grid == "fresh":
        return "fresh"
    return "cal" if index % 2 == 0 else "test"


# ----------------------------------------------------------------------------- weights
def is_moe(cfg, layer):
    return cfg["E"] > 0 and layer >= cfg.get("dense_layers", 0)


class Weights:
    def __init__(self, cfg, dev, seed=0):
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        d, H = cfg["d"], cfg["H"]
        r = lambda shape: randn(shape, dev, g)  # noqa: E731
        self.layers = []
        for li in range(cfg["L"]):
            lw = dict(ln1=1.0 + r((d,)), ln2=1.0 + r((d,)))
            if "mla" in cfg:
                a = cfg["mla"]
                lw.update(wq=r((H * (a["nope"] + a["rope"]), d)), wkv_a=r((a["kv_lora"] + a["rope"], d)),
                          kv_ln=1.0 + r((a["kv_lora"],)),
                          wkv_b=r((H * (a["nope"] + a["v"]), a["kv_lora"])), wo=r((d, H * a["v"])))
            else:
                hd, KVH = cfg["hd"], cfg["KVH"]
                lw.update(wqkv=r(((H + 2 * KVH) * hd, d)), wo=r((d, H * hd)))
                if cfg.get("qk_norm"):
                    lw.update(qn=1.0 + r((hd,)), kn=1.0 + r((hd,)))
            if is_moe(cfg, li):
                E, ff = cfg["E"], cfg["ff"]
                lw.update(wr=r((E, d)), w13=r((E, 2 * ff, d)), w2=r((E, d, ff)))
                if cfg.get("shared_ff"):
                    s = cfg["shared_ff"]
                    lw.update(s13=r((2 * s, d)), s2=r((d, s)))
                    if cfg.get("shared_gate"):
                        lw["sg"] = r((1, d))
            else:
                f = cfg["dense_ff"]
                lw.update(d13=r((2 * f, d)), d2=r((d, f)))
            self.layers.append(lw)
        self.lnf = 1.0 + r((d,))
        self.lm = r((cfg["vocab"], d))
        if "mla" in cfg:     # kv_b split per head into its key and value halves, for the absorbed decode
            a = cfg["mla"]
            for lw in self.layers:
                wkv_b = lw["wkv_b"].view(H, a["nope"] + a["v"], a["kv_lora"])
                lw["wk_b"] = wkv_b[:, :a["nope"]]          # [H, nope, kv_lora]
                lw["wv_b"] = wkv_b[:, a["nope"]:]          # [H, v, kv_lora]

    def nbytes(self):
        seen, n = set(), self.lnf.numel() + self.lm.numel()
        for lw in self.layers:
            for t in lw.values():
                if t.data_ptr() not in seen and t.is_contiguous():
                    seen.add(t.data_ptr())
                    n += t.numel()
        return 2 * n


def kv_bytes(cfg, b, ctx):
    per_token = (cfg["mla"]["kv_lora"] + cfg["mla"]["rope"]) if "mla" in cfg else 2 * cfg["KVH"] * cfg["hd"]
    return cfg["L"] * b * (ctx + 1) * per_token * 2


def make_cache(cfg, b, ctx, dev, seed=1):
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    if "mla" in cfg:
        a = cfg["mla"]
        return [(randn((b, ctx + 1, a["kv_lora"]), dev, g, scale=1.0), randn((b, ctx + 1, a["rope"]), dev, g, scale=1.0))
                for _ in range(cfg["L"])]
    return [randn((2, b, cfg["KVH"], ctx + 1, cfg["hd"]), dev, g, scale=1.0) for _ in range(cfg["L"])]


# ----------------------------------------------------------------------------- the schedule
def swiglu_mlp(h, w13, w2, ff):
    gu = mm(h, w13)
    OPS("silu")
    a = F.silu(gu[:, :ff])
    OPS("mul")
    return mm(a * gu[:, ff:], w2)


def ffn(x, h, lw, route, cfg, layer):
    if not is_moe(cfg, layer):
        z = swiglu_mlp(h, lw["d13"], lw["d2"], cfg["dense_ff"])
        OPS("add")
        return x + z
    if cfg.get("shared_ff"):     # the shared MLP first, added to the residual stream; then the routed loop
        s = swiglu_mlp(h, lw["s13"], lw["s2"], cfg["shared_ff"])
        if cfg.get("shared_gate"):
            gate = mm(h, lw["sg"])
            OPS("sigmoid")
            OPS("mul")
            s = torch.sigmoid(gate) * s
        OPS("add")
        x = x + s
    return base.moe(x, h, lw, route, cfg)          # the measured Mixtral/Qwen3 schedule


def qkv_heads(h, lw, cfg, rows):
    """The fused QKV GEMM, split into [rows, heads, hd] views; QK-norm on q and k if the model has it."""
    H, KVH, hd, eps = cfg["H"], cfg["KVH"], cfg["hd"], cfg["eps"]
    qkv = mm(h, lw["wqkv"])
    q = qkv[:, :H * hd].view(rows, H, hd)
    k = qkv[:, H * hd:(H + KVH) * hd].view(rows, KVH, hd)
    v = qkv[:, (H + KVH) * hd:].view(rows, KVH, hd)
    if cfg.get("qk_norm"):
        q = rms(q, lw["qn"], eps)
        k = rms(k, lw["kn"], eps)
    return q, k, v


def gqa_decode(h, lw, cfg, st, li):
    B, ctx = st["B"], st["ctx"]
    q, k, v = qkv_heads(h, lw, cfg, B)
    kc, vc = st["cache"][li][0], st["cache"][li][1]
    OPS("kv_copy", 2)
    kc[:, :, ctx].copy_(k)
    vc[:, :, ctx].copy_(v)
    lo = max(0, ctx + 1 - cfg["window"]) if cfg.get("window") and li % 2 == 0 else 0
    a = sdpa(q.unsqueeze(2), kc[:, :, lo:], vc[:, :, lo:], causal=False)
    return mm(to_rows(a.transpose(1, 2)[:, 0], B), lw["wo"])


def gqa_prefill(h, lw, cfg, st, li):
    T = st["T"]
    q, k, v = qkv_heads(h, lw, cfg, T)
    a = sdpa(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
             v.transpose(0, 1).unsqueeze(0), causal=True)
    return mm(to_rows(a[0].transpose(0, 1), T), lw["wo"])


def bmm(a, b):
    OPS("bmm")
    return torch.bmm(a, b)


def mla_decode(h, lw, cfg, st, li):
    B, ctx, H, a = st["B"], st["ctx"], cfg["H"], cfg["mla"]
    q = mm(h, lw["wq"]).view(B, H, a["nope"] + a["rope"])
    kv = mm(h, lw["wkv_a"])
    c = rms(kv[:, :a["kv_lora"]], lw["kv_ln"], cfg["eps"])
    latent, pe = st["cache"][li]                                  # [B, ctx+1, kv_lora], [B, ctx+1, rope]
    OPS("kv_copy", 2)
    latent[:, ctx].copy_(c)
    pe[:, ctx].copy_(kv[:, a["kv_lora"]:])
    OPS("transpose_copy")                                         # [B, H, nope] -> [H, B, nope]
    q_nope = q[:, :, :a["nope"]].transpose(0, 1).contiguous()
    q_lat = bmm(q_nope, lw["wk_b"]).transpose(0, 1)               # [B, H, kv_lora] (a view)
    OPS("contiguous_copy")
    q_pe = q[:, :, a["nope"]:].contiguous()
    OPS("contiguous_copy")
    q_lat = q_lat.contiguous()
    scores = bmm(q_lat, latent.transpose(1, 2))                   # [B, H, ctx+1]
    OPS("add")
    scores = scores + bmm(q_pe, pe.transpose(1, 2))
    OPS("softmax")
    p = torch.softmax(scores * (1.0 / (a["nope"] + a["rope"]) ** 0.5), dim=-1, dtype=torch.float32)
    OPS("mul")                                                    # the scale (before the softmax)
    OPS("cast")
    o_lat = bmm(p.to(torch.bfloat16), latent)                     # [B, H, kv_lora]
    OPS("transpose_copy")
    o = bmm(o_lat.transpose(0, 1).contiguous(), lw["wv_b"].transpose(1, 2))   # [H, B, v]
    OPS("transpose_copy")
    return mm(o.transpose(0, 1).reshape(B, H * a["v"]), lw["wo"])


def mla_prefill(h, lw, cfg, st, li):
    T, H, a = st["T"], cfg["H"], cfg["mla"]
    qk = a["nope"] + a["rope"]
    q = mm(h, lw["wq"]).view(T, H, qk)
    kv = mm(h, lw["wkv_a"])
    c = rms(kv[:, :a["kv_lora"]], lw["kv_ln"], cfg["eps"])
    kvb = mm(c, lw["wkv_b"]).view(T, H, a["nope"] + a["v"])
    OPS("cat")
    k = torch.cat([kvb[:, :, :a["nope"]], kv[:, None, a["kv_lora"]:].expand(T, H, a["rope"])], dim=-1)
    OPS("pad")
    v = F.pad(kvb[:, :, a["nope"]:], (0, qk - a["v"]))
    out = sdpa(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
               v.transpose(0, 1).unsqueeze(0), causal=True)       # [1, H, T, qk]
    OPS("attn_out_copy")
    o = out[0, :, :, :a["v"]].transpose(0, 1).reshape(T, H * a["v"])
    return mm(o, lw["wo"])


def step(W, cfg, st, phase):
    attn = {("decode", False): gqa_decode, ("prefill", False): gqa_prefill,
            ("decode", True): mla_decode, ("prefill", True): mla_prefill}[(phase, "mla" in cfg)]
    x, eps = st["x"], cfg["eps"]
    for li, lw in enumerate(W.layers):
        h = rms(x, lw["ln1"], eps)
        o = attn(h, lw, cfg, st, li)
        OPS("add")
        x = x + o
        h = rms(x, lw["ln2"], eps)
        x = ffn(x, h, lw, st["route"][li], cfg, li)
    h = rms(x if phase == "decode" else x[-1:], W.lnf, eps)
    return mm(h, W.lm)


# ----------------------------------------------------------------------------- main
def case_name(model, phase, b, ctx, prompt):
    return base.case_name(model, phase, b, ctx, prompt, "graph")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="CSV path (JSONL written beside it)")
    ap.add_argument("--dry", action="store_true", help="tiny shapes; CPU allowed")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--only", default=None, help="substring filter on case names")
    ap.add_argument("--replays", type=int, default=15)
    ap.add_argument("--max-kv-gb", type=float, default=40.0)
    ap.add_argument("--budget-s", type=float, default=560.0, help="start no new case after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grid", choices=("general", "fresh"), default="general",
                    help="the cal/test grid, or the fresh grid measured after session 8's change")
    args = ap.parse_args()

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.dry and dev != "cuda":
        sys.exit("no CUDA device: use --dry for the tiny CPU run")
    if args.out is None:
        args.out = os.path.join("/tmp", "hwsim_dry", "general_dry.csv") if args.dry else \
            os.path.join(HERE, "h200_general.csv")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    jpath = os.path.splitext(args.out)[0] + ".jsonl"
    models = DRY_MODELS if args.dry else MODELS
    torch.backends.cuda.matmul.allow_tf32 = False
    backend = base.pick_sdpa_backend(dev)
    meta = {"part": "meta", "script": "validation/measure_general.py", "dry": args.dry,
            "torch": torch.__version__, "triton": triton_version(), "python": platform.python_version(),
            "sdpa_backend": backend, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "argv": sys.argv[1:],
            "replays": args.replays}
    if dev == "cuda":
        meta.update(gpu=torch.cuda.get_device_name(), smi_before=smi_line())
    log(f"device={dev} sdpa: {backend}")
    fields = ["name", "hardware", "model", "phase", "batch", "context_tokens", "prompt_tokens",
              "kv_bits", "launch", "measured_ms", "split", "notes"]
    rows = []
    jf = open(jpath, "w")

    def jwrite(obj):
        jf.write(json.dumps(obj) + "\n")
        jf.flush()

    def write_csv():
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)

    jwrite(meta)
    write_csv()
    for model in [m for m in args.models.split(",") if m]:
        cfg = models[model]
        grid = DRY_CASES if args.dry else (FRESH_CASES if args.grid == "fresh" else CASES).get(model, [])
        cases = [(i, c) for i, c in enumerate(grid)
                 if args.only is None or args.only in case_name(model, c[0], c[1], c[2], c[3])]
        if not cases:
            continue
        if time.perf_counter() - T_START > args.budget_s:
            log(f"budget: skipping {model}")
            continue
        t0 = time.perf_counter()
        W = Weights(cfg, dev, seed=args.seed)
        log(f"{model}: weights {W.nbytes() / 1e9:.1f} GB in {time.perf_counter() - t0:.1f}s")
        for index, (phase, b, ctx, prompt) in cases:
            name = case_name(model, phase, b, ctx, prompt)
            if time.perf_counter() - T_START > args.budget_s:
                log(f"SKIP {name}: time budget")
                jwrite({"part": "skipped", "name": name, "reason": "time budget"})
                continue
            kvb = kv_bytes(cfg, b, ctx) if phase == "decode" else 0
            if kvb > args.max_kv_gb * 1e9 or (dev == "cuda" and kvb + 8 * 2 ** 30 > torch.cuda.mem_get_info()[0]):
                log(f"SKIP {name}: KV {kvb / 1e9:.1f} GB")
                jwrite({"part": "skipped", "name": name, "kv_bytes": kvb, "reason": "memory"})
                continue
            ntok = b if phase == "decode" else prompt
            tc = time.perf_counter()
            try:
                g = torch.Generator(device=dev)
                g.manual_seed(args.seed + 7)
                st = {"B": b, "ctx": ctx, "T": prompt,
                      "x": torch.randn((ntok, cfg["d"]), dtype=torch.bfloat16, device=dev, generator=g),
                      "route": (base.make_routing(cfg, ntok, dev, seed=args.seed + 1000 + ntok)
                                if cfg["E"] else [[] for _ in range(cfg["L"])])}
                if phase == "decode":
                    st["cache"] = make_cache(cfg, b, ctx, dev)
                fn = lambda: step(W, cfg, st, phase)  # noqa: E731
                ms, info = base.time_cpu(fn, 2) if dev != "cuda" else base.time_graph(fn, args.replays)
            except Exception as e:
                log(f"FAIL {name}: {e!r}")
                jwrite({"part": "error", "name": name, "error": repr(e)[:2000]})
                st = None
                gc.collect()
                if dev == "cuda":
                    torch.cuda.empty_cache()
                continue
            med, p10, p90 = base.pct(ms)
            nexp = [len(r) for r in st["route"] if r]
            jwrite({"part": "step", "name": name, "model": model, "phase": phase, "batch": b,
                    "context_tokens": ctx, "prompt_tokens": prompt, "split": split_of(index, args.grid), "ms": med,
                    "p10": p10, "p90": p90, "replays_ms": ms, "kv_bytes": kvb, "weight_bytes": W.nbytes(),
                    "experts_per_layer": nexp, "case_wall_s": round(time.perf_counter() - tc, 2), **info})
            notes = [f"graph median of {len(ms)} (p10 {p10:.3f} p90 {p90:.3f} ms)",
                     f"sdpa={'flash' if base.SDPA_CTX else 'default'}", f"ops {info['ops']}",
                     "fixed uniform top-k routing", "no RoPE", "measure_general.py schedule"]
            if args.dry:
                notes.append("DRY tiny shapes")
            rows.append({"name": name, "hardware": "h200-sxm" if not args.dry else f"dry-{dev}",
                         "model": model, "phase": phase, "batch": b if phase == "decode" else 1,
                         "context_tokens": ctx if phase == "decode" else 0,
                         "prompt_tokens": prompt if phase == "prefill" else 0, "kv_bits": 16,
                         "launch": "graph", "measured_ms": f"{med:.4f}", "split": split_of(index, args.grid),
                         "notes": "; ".join(notes)})
            write_csv()
            log(f"{name} [{split_of(index, args.grid)}]: {med:.3f} ms (p10 {p10:.3f} p90 {p90:.3f}) ops={info['ops']} "
                f"case {time.perf_counter() - tc:.1f}s")
            st = None
            gc.collect()
            if dev == "cuda":
                torch.cuda.empty_cache()
        W = None
        gc.collect()
        if dev == "cuda":
            torch.cuda.empty_cache()
    if dev == "cuda":
        jwrite({"part": "meta_end", "smi_after": smi_line(), "total_s": round(time.perf_counter() - T_START, 1)})
    jf.close()
    log(f"done: {len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
