#!/usr/bin/env python3
"""Whole graph-mode decode steps of MoE layer stacks split over several GPUs of one host (issue
20): the multi-GPU validation targets of hwsim's `parallel:` layouts (docs/multi_gpu.md).

    python3 validation/measure_ep_steps.py --setup qwen3-235b-a22b:tp-ep:4 --out $OUT/ep4.jsonl
    python3 validation/measure_ep_steps.py --dry          # gloo on the CPU, 2 ranks, tiny shapes
    python3 validation/measure_ep_steps.py --solo --setup mixtral-8x22b:tp:2 --out $OUT/solo.jsonl
    python3 validation/measure_ep_steps.py --cases fresh --out $OUT/fresh.jsonl   # 2 GPUs, test grid
    python3 validation/measure_ep_steps.py --cases prefill --out $OUT/prefill.jsonl
    python3 validation/ep_steps_to_csv.py $OUT/ep4.jsonl --out validation/data/h200x8_ep_steps.csv

One process per GPU (torch.distributed, NCCL). Each rank holds its shard of a random-weight
model (randn * 0.02) and runs validation/measure_steps.py's decode step on it (the same
kernels: RMSNorm, fused QKV GEMM, QK-norm, KV-cache copies, flash SDPA, o-proj, router GEMM +
softmax, the per-expert loop, LM head; fixed uniform top-k routing; no RoPE), with the layout's
collectives where hwsim places them (hwsim/parallel/multi.py):
- `tp` (Mixtral-8x22B on 2 GPUs, vLLM's layout): heads, KV heads, each expert's FFN and the LM
  head split over the GPUs; an all-reduce of the hidden states after the attention block and
  after the MoE layer, an all-gather of the logits. FP8 weights (attention and experts, as
  scenarios/mixtral-8x22b-tp2.yaml): 282 GB of bf16 do not fit two H200.
- `tp-ep` (Qwen3-235B-A22B on 4 or 8 GPUs, vLLM with expert parallelism): attention as `tp`
  (KV heads replicated where the GPUs outnumber them), whole experts, E/G a GPU, each running
  the choices that reach it; the MoE layer's all-reduce also sums the GPUs' expert outputs.
- `dp-ep` (Qwen3-235B-A22B on 8, SGLang's DP attention): each GPU its B/G sequences, whole
  attention; experts as `tp-ep`; a dispatch (one message per (token, expert), bf16,
  all_to_all_single) before the experts and the combine back after them.
The whole step is captured as one CUDA graph per rank (collectives inside); each replay starts
after a barrier and is timed with CUDA events; the step's time is the slowest rank's, per replay.
Raw JSONL: a meta record, then one record per step (median, p10, p90, every replay, ops).

`--solo` (for a machine of one GPU): one process runs rank 0's shard of the layout alone, with
every collective left out (counted by kind in `collectives_left_out`): the step's computation on
one of its GPUs, without the links. For `tp` it is every GPU's (their work is the same), which
hwsim predicts as a single-GPU step of the shard's model (validation/shards/).
"""

import argparse
import gc
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "calibration"))
import dist_env as de  # noqa: E402
import measure_steps as ms  # noqa: E402
import moe_impls as mi  # noqa: E402

from ep_layouts import (  # noqa: E402,F401 - the layouts, shared with machines without torch
    MODELS, DRY_MODELS, SETUPS, DRY_SETUPS, CASES, DRY_CASES,
    FRESH_CASES, FRESH_SETUPS, PREFILL_CASES, PREFILL_SETUPS, DRY_PREFILL_CASES, Shard)


def weights(sh, dev, fmt, seed=0):
    """This rank's shard, random; FP8 linears quantized layer by layer (the bf16 whole never
    exists, so Mixtral-8x22B's 141 GB a GPU of bf16 is never allocated)."""
    c, g = sh.cfg, torch.Generator(device=dev)
    g.manual_seed(seed + sh.rank)
    d, hd = c["d"], c["hd"]
    conv = mi.Fp8Weight if fmt == "fp8" else (lambda w: w)
    layers = []
    for _ in range(c["L"]):
        lw = dict(ln1=1.0 + ms.randn((d,), dev, g), ln2=1.0 + ms.randn((d,), dev, g),
                  wqkv=conv(ms.randn(((sh.heads + 2 * sh.kv_heads) * hd, d), dev, g)),
                  wo=conv(ms.randn((d, sh.heads * hd), dev, g)), wr=ms.randn((c["E"], d), dev, g),
                  w13=[conv(ms.randn((2 * sh.ff, d), dev, g)) for _ in sh.experts],
                  w2=[conv(ms.randn((d, sh.ff), dev, g)) for _ in sh.experts])
        if c["qk_norm"]:
            lw["qn"], lw["kn"] = 1.0 + ms.randn((hd,), dev, g), 1.0 + ms.randn((hd,), dev, g)
        layers.append(lw)
    return dict(layers=layers, lnf=1.0 + ms.randn((d,), dev, g), lm=ms.randn((sh.vocab, d), dev, g))


def routing(sh, batch, dev, seed):
    """Per layer, this rank's part of one fixed draw for the whole batch (every rank draws the
    same): each token's k distinct experts uniformly, router weights normalised over its k.
    tp / tp-ep: [(local expert, token idx, weight)] for the experts here. dp-ep: the dispatch
    plan: send order, split sizes, and for the received rows their local expert and weight."""
    c = sh.cfg
    gen = torch.Generator().manual_seed(seed)
    owner = sh.owner(batch)
    mine = np.flatnonzero(owner == sh.rank) if sh.tp == 1 else np.arange(batch)
    local_of = {t: i for i, t in enumerate(mine)}
    out = []
    for _ in range(c["L"]):
        choice = torch.rand(batch, c["E"], generator=gen).argsort(dim=1)[:, :c["k"]].numpy()
        w = torch.rand(batch, c["k"], generator=gen).numpy() + 0.05
        w = w / w.sum(1, keepdims=True)
        if sh.layout != "dp-ep":
            lay = []
            for le, e in enumerate(sh.experts):
                rows, cols = np.nonzero(choice == e)
                if len(rows):
                    lay.append((le, torch.tensor(rows, device=dev),
                                torch.tensor(w[rows, cols], dtype=torch.bfloat16, device=dev).view(-1, 1)))
            out.append(lay)
            continue
        pairs = [(sh.rank_of_expert(int(e)), int(o), t, j) for t, (o, row) in enumerate(zip(owner, choice))
                 for j, e in enumerate(row)]
        pairs.sort()                                          # by destination, then source, token, choice
        send = [(t, j) for dst, o, t, j in pairs if o == sh.rank]
        recv = [(t, j) for dst, o, t, j in pairs if dst == sh.rank]
        send_split = [sum(1 for dst, o, _, _ in pairs if o == sh.rank and dst == r) for r in range(sh.world)]
        recv_split = [sum(1 for dst, o, _, _ in pairs if dst == sh.rank and o == r) for r in range(sh.world)]
        first = sh.experts[0]
        by_expert = {}
        for i, (t, j) in enumerate(recv):
            by_expert.setdefault(int(choice[t, j]) - first, []).append((i, w[t, j]))
        lay = [(le, torch.tensor([i for i, _ in rows], device=dev),
                torch.tensor([x for _, x in rows], dtype=torch.bfloat16, device=dev).view(-1, 1))
               for le, rows in sorted(by_expert.items())]
        out.append(dict(send_tok=torch.tensor([local_of[t] for t, _ in send], device=dev, dtype=torch.long),
                        send_split=send_split, recv_split=recv_split, n_recv=len(recv), experts=lay))
    return out


SOLO = {"on": False, "left_out": {}}     # --solo: collectives left out, counted by kind


def comm(kind, fn):
    if SOLO["on"]:
        SOLO["left_out"][kind] = SOLO["left_out"].get(kind, 0) + 1
        return
    ms.OPS(kind)
    fn()


def expert_loop(h, lw, route, ff, out):
    """validation/measure_steps.moe's expert loop over the choices here, into out."""
    for le, idx, w in route:
        ms.OPS("index_select")
        xe = h.index_select(0, idx)
        gu = ms.mm(xe, lw["w13"][le])
        ms.OPS("silu")
        a = torch.nn.functional.silu(gu[:, :ff])
        ms.OPS("mul")
        a = a * gu[:, ff:]
        z = ms.mm(a, lw["w2"][le])
        ms.OPS("scale")
        z = z * w
        ms.OPS("index_add")
        out.index_add_(0, idx, z)
    return out


def moe(x, h, lw, route, sh):
    logits = ms.mm(h, lw["wr"])
    ms.OPS("softmax")
    torch.softmax(logits, dim=-1, dtype=torch.float32)        # its cost: routing is fixed
    if sh.layout != "dp-ep":
        ms.OPS("zero")
        y = expert_loop(h, lw, route, sh.ff, torch.zeros_like(x))
        if sh.world > 1:
            comm("all_reduce", lambda: dist.all_reduce(y))
    else:
        ms.OPS("index_select")
        send = h.index_select(0, route["send_tok"])
        recv = torch.empty((route["n_recv"], h.shape[1]), dtype=h.dtype, device=h.device)
        comm("dispatch", lambda: dist.all_to_all_single(recv, send, route["recv_split"], route["send_split"]))
        ms.OPS("zero")
        done = expert_loop(recv, lw, route["experts"], sh.ff, torch.zeros_like(recv))
        back = torch.empty_like(send)
        comm("combine", lambda: dist.all_to_all_single(back, done, route["send_split"], route["recv_split"]))
        ms.OPS("zero")
        y = torch.zeros_like(x)
        ms.OPS("index_add")
        y.index_add_(0, route["send_tok"], back)
    ms.OPS("add")
    return x + y


def decode_attention(q, k, v, li, st):
    """One new token a sequence: its K and V into the cache, attention over the cache."""
    kc, vc = st["cache"][li][0], st["cache"][li][1]
    ms.OPS("kv_copy", 2)
    kc[:, :, st["ctx"]].copy_(k)
    vc[:, :, st["ctx"]].copy_(v)
    return ms.sdpa(q.unsqueeze(2), kc, vc, causal=False).transpose(1, 2)[:, 0]


def prefill_attention(q, k, v, li, st):
    """One prompt: causal attention over it (no KV cache kept, as validation/measure_steps.py)."""
    a = ms.sdpa(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                v.transpose(0, 1).unsqueeze(0), causal=True)
    return a[0].transpose(0, 1)


def step_pass(W, sh, st, attention):
    """A pass of st["B"] rows (a decode batch, or a prompt's tokens) through every layer."""
    c, B = sh.cfg, st["B"]
    H, KVH, hd, eps = sh.heads, sh.kv_heads, c["hd"], c["eps"]
    x = st["x"]
    for li, lw in enumerate(W["layers"]):
        h = ms.rms(x, lw["ln1"], eps)
        qkv = ms.mm(h, lw["wqkv"])
        q = qkv[:, :H * hd].view(B, H, hd)
        k = qkv[:, H * hd:(H + KVH) * hd].view(B, KVH, hd)
        v = qkv[:, (H + KVH) * hd:].view(B, KVH, hd)
        if c["qk_norm"]:
            q, k = ms.rms(q, lw["qn"], eps), ms.rms(k, lw["kn"], eps)
        o = ms.mm(ms.to_rows(attention(q, k, v, li, st), B), lw["wo"])
        if sh.tp > 1:
            comm("all_reduce", lambda: dist.all_reduce(o))
        ms.OPS("add")
        x = x + o
        h = ms.rms(x, lw["ln2"], eps)
        x = moe(x, h, lw, st["route"][li], sh)
    last = x if st["phase"] == "decode" else x[-1:]          # a prompt's LM head: its last token
    logits = ms.mm(ms.rms(last, W["lnf"], eps), W["lm"])
    if sh.tp > 1 and not SOLO["on"]:
        every = torch.empty((sh.tp * logits.shape[0], logits.shape[1]), dtype=logits.dtype, device=logits.device)
        comm("all_gather", lambda: de.ALL_GATHER(every, logits))
        return every
    return logits


def fp8_mm(x, w):
    ms.OPS("gemm")
    if isinstance(w, mi.Fp8Weight):
        return mi.fp8_linear(x, w)
    return torch.matmul(x, w.t())


def time_step(fn, dev, replays):
    """Seconds of each replay on this rank: the step as one CUDA graph, or (CPU) plain calls."""
    if dev.type == "cuda":
        with ms.run_ctx():
            graph, out = de.capture(fn, 1, warm=2)
        info = {"ops": ms.OPS.n, "ops_by_kind": dict(ms.OPS.by_kind),
                "finite": bool(torch.isfinite(out.float()).all().item())}
        times = de.time_replays(graph, replays)
        del graph
        return times, info
    out = fn()
    info = {"ops": ms.OPS.n, "ops_by_kind": dict(ms.OPS.by_kind), "finite": bool(torch.isfinite(out.float()).all())}
    return de.time_calls(fn, dev, 1, replays, warm=0), info


def worker(rank, world, args, setup, cases):
    model, layout, gpus, fmt = setup
    dev = de.init(rank, world, args.dry)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        backend = ms.pick_sdpa_backend("cuda")
    else:
        backend = "default (CPU)"
    cfg = (DRY_MODELS if args.dry else MODELS)[model]
    SOLO["on"] = args.solo
    sh = Shard(cfg, layout, gpus if args.solo else world, rank)
    out = open(args.out, "a") if rank == 0 else None
    ms.mm = fp8_mm if fmt == "fp8" else ms.mm
    t0 = time.perf_counter()
    W = weights(sh, dev, fmt)
    de.sync(dev)
    build_s = time.perf_counter() - t0
    phase = "prefill" if args.cases == "prefill" else "decode"
    for rows, ctx, split in cases:          # decode: a batch of sequences; prefill: a prompt's tokens
        solo = "rank0solo-" if args.solo else ""
        name = (f"{model}-{layout}{sh.world}-{fmt}-{solo}" +
                (f"decode-b{rows}-l{ctx}-graph" if phase == "decode" else f"prefill-t{rows}-graph"))
        late = de.max_over_ranks([time.time() - args.t_start > args.budget_s], dev)[0]
        if late or (layout == "dp-ep" and rows < world):
            out and out.write(json.dumps({"part": "skipped", "name": name,
                                          "reason": "time budget" if late else "fewer sequences than GPUs"}) + "\n")
            continue
        local = rows if sh.tp > 1 else int((sh.owner(rows) == rank).sum())
        g = torch.Generator(device=dev).manual_seed(7 + rank)
        st = {"B": local, "ctx": ctx, "phase": phase, "route": routing(sh, rows, dev, seed=1000 + rows),
              "x": torch.randn((local, cfg["d"]), dtype=torch.bfloat16, device=dev, generator=g)}
        if phase == "decode":
            st["cache"] = ms.make_cache(dict(cfg, KVH=sh.kv_heads), local, ctx, dev)
        attention = decode_attention if phase == "decode" else prefill_attention

        def step():
            ms.OPS.reset()                  # the ops of the last call: the captured one
            SOLO["left_out"] = {}
            return step_pass(W, sh, st, attention)
        times, info = time_step(step, dev, args.replays)
        slowest = de.max_over_ranks(times, dev)
        if out:
            med, p10, p90 = ms.pct([t * 1e3 for t in slowest])
            out.write(json.dumps({
                "part": "step", "name": name, "model": model, "layout": layout, "gpus": sh.world, "tp": sh.tp,
                "solo": args.solo, "collectives_left_out": SOLO["left_out"],
                "ep": sh.ep, "weights": fmt, "moe_schedule": "per-expert", "phase": phase,
                "batch": rows if phase == "decode" else 1, "context_tokens": ctx,
                "prompt_tokens": rows if phase == "prefill" else 0,
                "split": split, "ms": med, "p10": p10, "p90": p90,
                "replays_ms": [round(t * 1e3, 4) for t in slowest], "rank0_replays_ms": [round(t * 1e3, 4) for t in times],
                "sdpa_backend": backend, "weights_build_s": round(build_s, 1), **info}) + "\n")
            out.flush()
            print(f"[{rank}] {name}: {med:.3f} ms (ops {info['ops']})", flush=True)
        st = None
        gc.collect()
        torch.cuda.empty_cache() if dev.type == "cuda" else None
    if out:
        out.close()
    de.finish()


def parse_setup(text):
    model, layout, gpus = text.split(":")[:3]
    fmt = text.split(":")[3] if text.count(":") >= 3 else ("fp8" if model == "mixtral-8x22b" else "bf16")
    return model, layout, int(gpus), fmt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--dry", action="store_true", help="gloo on the CPU, 2 ranks, tiny shapes")
    ap.add_argument("--setup", action="append", default=None,
                    help="model:layout:gpus[:weights], e.g. qwen3-235b-a22b:tp-ep:4 (repeatable; default: all)")
    ap.add_argument("--batches", default=None, help="only these batches, e.g. 1,8")
    ap.add_argument("--cases", choices=("grid", "fresh", "prefill"), default="grid",
                    help="fresh: the decode test grid of validation/multi_gpu_grid.md (FRESH_CASES, "
                         "FRESH_SETUPS); prefill: its prefill grid (PREFILL_CASES, PREFILL_SETUPS)")
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=480.0, help="no new case after this many seconds")
    ap.add_argument("--solo", action="store_true",
                    help="one GPU runs rank 0's shard of each setup alone, its collectives left out "
                         "(tp and tp-ep layouts): what a GPU of the step computes, without the links")
    args = ap.parse_args()
    args.t_start = time.time()
    if not args.dry and not torch.cuda.is_available():
        sys.exit("no CUDA device: use --dry")
    grids = {"grid": (SETUPS, CASES, DRY_CASES), "fresh": (FRESH_SETUPS, FRESH_CASES, DRY_CASES),
             "prefill": (PREFILL_SETUPS, PREFILL_CASES, DRY_PREFILL_CASES)}
    setups, cases, dry_cases = grids[args.cases]
    setups = [parse_setup(s) for s in args.setup] if args.setup else DRY_SETUPS if args.dry else setups
    cases = dry_cases if args.dry else cases
    if args.batches:
        cases = [c for c in cases if c[0] in {int(b) for b in args.batches.split(",")}]
    if args.dry:
        args.replays = min(args.replays, 2)
    args.out = args.out or ("/tmp/hwsim_dry/ep_steps_dry.jsonl" if args.dry
                            else os.path.join(HERE, "data", "h200x8_ep_steps.jsonl"))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    from device_env import jsonl_out, log, triton_version
    with jsonl_out(args.out, "validation/measure_ep_steps.py", dry=args.dry, solo=args.solo, triton=triton_version(),
                   setups=setups, gpus_here=torch.cuda.device_count(),
                   nccl=".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
                   topology=de.topo_text() if torch.cuda.is_available() else None):
        pass                                            # the meta record; rank 0 appends the steps
    for setup in setups:
        if args.solo and setup[1] == "dp-ep":
            log(f"skip {setup}: --solo leaves a dispatch's received tokens unwritten")
            continue
        if not args.dry and not args.solo and setup[2] > torch.cuda.device_count():
            log(f"skip {setup}: {torch.cuda.device_count()} GPUs here")
            continue
        log(f"{setup}")
        de.spawn(worker, 1 if args.solo else setup[2], args, setup, cases)
    log(f"done -> {args.out}")


if __name__ == "__main__":
    main()
