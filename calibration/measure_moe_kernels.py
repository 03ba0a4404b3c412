"""CUPTI kernel traces of one MoE layer under the three schedules, and of quantized GEMMs (issue 16).

    python3 calibration/measure_moe_kernels.py --out $OUT/h200_moe_kernels.jsonl [--dry] [--parts ...]

- `moe`: one MoE layer (router GEMM to the final combine) of Mixtral-8x7B, Qwen3-30B-A3B and
  OLMoE-1B-7B shapes at 1..256 tokens, each schedule of calibration/moe_impls.py: `grouped`
  (torch._grouped_mm as torchtitan runs it), `fused` (the Triton fused MoE in vLLM's design) and
  `per-expert` (the loop of validation/measure_steps.py). REPS layers, each with its own weight
  copy (so every layer streams its experts from HBM), are captured in one CUDA graph; CUPTI
  gives every kernel's name, grid, block, shared memory and device time by position in the
  layer, and CUDA events the replay's time per layer.
- `quant`: decode-shaped GEMMs x[m, k] @ W[n, k]^T in bf16 (cuBLAS), FP8 (cast + torch._scaled_mm,
  per-tensor scales), int4 weight-only (torch._weight_int4pack_mm, group 128) and the Triton
  W4A16 kernel (group 128), weights cycled through copies that outgrow the L2; and
  torch._scaled_grouped_mm (rowwise FP8) when this PyTorch has it.

Routing is a fixed uniform draw of k distinct experts per token (seeded), as in the step
measurements. One JSON object a line; a failing case writes {"part": "error"} and the run goes on.
"""

import argparse
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_impls as mi  # noqa: E402
from device_env import jsonl_out, log, profile_graph, time_replays  # noqa: E402

REPS = 4
MODELS = {"mixtral-8x7b": dict(d=4096, ff=14336, E=8, k=2),
          "qwen3-30b-a3b": dict(d=2048, ff=768, E=128, k=8),
          "olmoe-1b-7b": dict(d=2048, ff=1024, E=64, k=8)}
DRY_MODELS = {"mixtral-8x7b": dict(d=256, ff=512, E=8, k=2),
              "qwen3-30b-a3b": dict(d=256, ff=128, E=16, k=4)}
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SCHEDULES = ["grouped", "fused", "per-expert"]
# (k, n) of the decode GEMMs: Mixtral gate+up, down, QKV; Qwen3 expert gate+up, down, QKV
QUANT_SHAPES = [(4096, 28672), (14336, 4096), (4096, 6144), (2048, 1536), (768, 2048), (2048, 5120)]
QUANT_ROWS = [1, 4, 16, 64, 256]
COPIES_BYTES = 256 * 2 ** 20


def routing(T, E, k, dev, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    choice = torch.rand(T, E, generator=g).argsort(dim=1)[:, :k]
    w = torch.rand(T, k, generator=g) + 0.05
    w = w / w.sum(1, keepdim=True)
    return choice.to(dev), w.to(torch.bfloat16).to(dev)


def layer_weights(cfg, dev, gen):
    d, ff, E = cfg["d"], cfg["ff"], cfg["E"]
    r = lambda *s: (torch.randn(*s, device=dev, dtype=torch.bfloat16, generator=gen) * 0.02)  # noqa: E731
    return dict(wr=r(E, d), w13=r(E, 2 * ff, d), w2=r(E, d, ff))


def per_expert_moe(h, lw, topi, topw, E, k, ff):
    """validation/measure_steps.py's loop, routed by the same fixed draw (index lists per expert
    are built on the host, outside the graph, as there)."""
    scores = h @ lw["wr"].t()
    torch.softmax(scores, dim=-1, dtype=torch.float32)
    y = torch.zeros_like(h)
    for e, idx, w in lw["_route"]:
        xe = h.index_select(0, idx)
        gu = xe @ lw["w13"][e].t()
        a = torch.nn.functional.silu(gu[:, :ff]) * gu[:, ff:]
        z = (a @ lw["w2"][e].t()) * w
        y.index_add_(0, idx, z)
    return y


def host_route(topi, topw, E, dev):
    ti, tw = topi.cpu(), topw.cpu()
    out = []
    for e in range(E):
        hit = ti == e
        rows = hit.any(1).nonzero().flatten()
        if rows.numel():
            out.append((e, rows.to(dev), (tw.float() * hit).sum(1)[rows].to(torch.bfloat16).view(-1, 1).to(dev)))
    return out


def by_position(kernels, reps):
    period = len(kernels) // reps
    out = []
    for pos in range(period):
        ks = kernels[pos::period][:reps]
        d = sorted(k["dur"] for k in ks)
        out.append({"pos": pos, "kernel": ks[0]["name"][:160], "same_name": len({k["name"] for k in ks}) == 1,
                    "us": d[len(d) // 2], "min": d[0], "max": d[-1], "grid": ks[0]["grid"],
                    "block": ks[0]["block"], "smem": ks[0]["smem"], "regs": ks[0]["regs"]})
    return out


def graph_ms(fn, replays=10):
    """CUDA-event time of one replay of `fn` captured as a graph (median of `replays`)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        fn()
    ms = sorted(time_replays(g, replays, 3))
    return ms[len(ms) // 2]


def moe_part(write, dry, dev, only_models=None):
    models = DRY_MODELS if dry else MODELS
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    for model, cfg in models.items():
        if only_models and model not in only_models:
            continue
        d, ff, E, k = cfg["d"], cfg["ff"], cfg["E"], cfg["k"]
        layers = [layer_weights(cfg, dev, gen) for _ in range(REPS)]
        for lw in layers:
            lw["w13_t"], lw["w2_t"] = lw["w13"].transpose(1, 2), lw["w2"].transpose(1, 2)
        log(f"{model}: {REPS} layer copies allocated")
        for T in (BATCHES[:3] if dry else BATCHES):
            topi, topw = routing(T, E, k, dev, seed=1000 + T)
            h = torch.randn(T, d, device=dev, dtype=torch.bfloat16)
            route = host_route(topi, topw, E, dev)
            for lw in layers:
                lw["_route"] = route
            fns = {
                "grouped": lambda: [mi.grouped_moe(h, lw["wr"], lw["w13_t"], lw["w2_t"], topi, topw, E, k, ff)
                                    for lw in layers],
                "fused": lambda: [mi.fused_moe(h, lw["wr"], lw["w13"], lw["w2"], topi, topw, E, k, ff)
                                  for lw in layers],
                "per-expert": lambda: [per_expert_moe(h, lw, topi, topw, E, k, ff) for lw in layers],
            }
            for sched, fn in fns.items():
                rec = {"part": "moe", "model": model, "schedule": sched, "tokens": T, "d": d, "ff": ff,
                       "E": E, "k": k, "active_experts": len(route), "reps": REPS}
                try:
                    if dev != "cuda":
                        fn()
                        write({**rec, "note": "CPU dry run: reference ops only"})
                        continue
                    if sched == "fused":
                        rec["config"] = mi.fused_config(T, E)
                    pos = by_position(profile_graph(fn, torch.no_grad), REPS)
                    layer_ms = graph_ms(fn) / REPS
                    write({**rec, "layer_ms": layer_ms, "positions": pos})
                    log(f"{model} T={T} {sched}: {layer_ms * 1e3:.1f} us/layer, {len(pos)} kernels")
                except Exception as e:
                    write({**rec, "part": "error", "error": repr(e)[:1500], "tb": traceback.format_exc()[-1500:]})
                    log(f"FAIL {model} T={T} {sched}: {e!r}"[:300])
            if dev == "cuda":
                torch.cuda.empty_cache()
        del layers
        if dev == "cuda":
            torch.cuda.empty_cache()


def quant_part(write, dry, dev):
    shapes = [(256, 512), (512, 256)] if dry else QUANT_SHAPES
    for kk, n in shapes:
        copies = 1 if dry else max(1, min(16, COPIES_BYTES // (2 * kk * n)))
        ws = [torch.randn(n, kk, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        variants = {"bf16": (ws, lambda x, w: x @ w.t())}
        try:
            variants["fp8"] = ([mi.Fp8Weight(w) for w in ws], mi.fp8_linear)
        except Exception as e:
            write({"part": "error", "what": f"fp8 weights {kk}x{n}", "error": repr(e)[:1000]})
        try:
            q4 = [mi.Int4Weight(w, 128) for w in ws]
            variants["int4_tinygemm"] = (q4, mi.int4_linear)
            variants["int4_triton_w4a16"] = (q4, mi.w4a16_linear)
        except Exception as e:
            write({"part": "error", "what": f"int4 weights {kk}x{n}", "error": repr(e)[:1000]})
        for m in (QUANT_ROWS[:2] if dry else QUANT_ROWS):
            x = torch.randn(m, kk, device=dev, dtype=torch.bfloat16)
            for fmt, (qw, f) in variants.items():
                rec = {"part": "quant_gemm", "format": fmt, "m": m, "k": kk, "n": n, "calls": copies,
                       "weight_bytes_per_call": getattr(qw[0], "nbytes", 2 * kk * n)}
                try:
                    fn = lambda qw=qw, f=f, x=x: [f(x, w) for w in qw]  # noqa: E731
                    if dev != "cuda":
                        fn()
                        write({**rec, "note": "CPU dry run"})
                        continue
                    ref = (x @ ws[0].t()).float()
                    err = ((f(x, qw[0]).float() - ref).norm() / ref.norm()).item()
                    pos = by_position(profile_graph(fn, torch.no_grad), copies)
                    call_ms = graph_ms(fn) / copies
                    write({**rec, "call_ms": call_ms, "rel_err": err, "positions": pos})
                    log(f"quant {fmt} m={m} {kk}x{n}: {call_ms * 1e3:.1f} us, err {err:.3f}")
                except Exception as e:
                    write({**rec, "part": "error", "error": repr(e)[:1500], "tb": traceback.format_exc()[-1500:]})
                    log(f"FAIL quant {fmt} m={m} {kk}x{n}: {e!r}"[:300])
        del ws, variants
        if dev == "cuda":
            torch.cuda.empty_cache()
    scaled_grouped(write, dry, dev)


def scaled_grouped(write, dry, dev):
    """torch._scaled_grouped_mm (FP8 rowwise) on the MoE gate+up shape, if this PyTorch has it."""
    if not hasattr(torch, "_scaled_grouped_mm") or dev != "cuda":
        write({"part": "scaled_grouped_mm", "available": hasattr(torch, "_scaled_grouped_mm"), "ran": False})
        return
    for model, cfg in (DRY_MODELS if dry else MODELS).items():
        d, ff, E, k = cfg["d"], cfg["ff"], cfg["E"], cfg["k"]
        wq = (torch.randn(E, 2 * ff, d, device=dev) * 0.02).to(mi.FP8)
        sb = torch.full((E, 2 * ff), 1e-2, device=dev, dtype=torch.float32)
        wb = torch.randn(E, 2 * ff, d, device=dev, dtype=torch.bfloat16) * 0.02
        for T in ([1, 4] if dry else [1, 8, 64, 256]):
            topi, _ = routing(T, E, k, dev, seed=1000 + T)
            counts = torch.bincount(topi.reshape(-1).cpu(), minlength=E)
            # _scaled_grouped_mm wants each group's rows padded to 16 (as torchtitan's fp8 path does)
            padded = ((counts + 15) // 16) * 16
            offs = torch.cumsum(padded, 0).to(torch.int32).to(dev)
            rows = int(padded.sum())
            xq = (torch.randn(rows, d, device=dev) * 0.1).to(mi.FP8)
            sa = torch.ones(rows, device=dev, dtype=torch.float32)
            xb = torch.randn(rows, d, device=dev, dtype=torch.bfloat16)
            for fmt, fn in (("fp8", lambda: torch._scaled_grouped_mm(xq, wq.transpose(1, 2), sa, sb, offs=offs,
                                                                     out_dtype=torch.bfloat16)),
                            ("bf16", lambda: torch._grouped_mm(xb, wb.transpose(1, 2), offs=offs))):
                rec = {"part": "scaled_grouped_mm", "format": fmt, "model": model, "tokens": T, "rows": rows,
                       "E": E, "k": d, "n": 2 * ff, "active_experts": int((counts > 0).sum())}
                try:
                    pos = by_position(profile_graph(fn, torch.no_grad), 1)
                    write({**rec, "positions": pos})
                    log(f"scaled_grouped {fmt} {model} T={T}: " + ", ".join(f"{p['kernel'][:30]} {p['us']:.1f}" for p in pos))
                except Exception as e:
                    write({**rec, "part": "error", "error": repr(e)[:1500]})
                    log(f"FAIL scaled_grouped {fmt} {model} T={T}: {e!r}"[:300])
        del wq, wb
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="tiny shapes; runs on a CPU (reference ops)")
    ap.add_argument("--parts", default="moe,quant")
    ap.add_argument("--models", default=None)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with jsonl_out(args.out, "calibration/measure_moe_kernels.py", reps=REPS, dry=args.dry,
                   triton=getattr(mi.triton, "__version__", None),
                   has_scaled_grouped_mm=hasattr(torch, "_scaled_grouped_mm")) as write:
        if "moe" in args.parts:
            moe_part(write, args.dry, dev, args.models.split(",") if args.models else None)
        if "quant" in args.parts:
            quant_part(write, args.dry, dev)
    log("done")


if __name__ == "__main__":
    main()
