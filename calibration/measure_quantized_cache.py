"""Measure transformers' QuantizedCache (HQQ backend) against the bf16 DynamicCache: decode steps
of a model built from its config (random bf16 weights) at long contexts (issue 44, item 2).

    python3 calibration/measure_quantized_cache.py --out $OUT/qcache [--budget-s 150]
    python3 calibration/measure_quantized_cache.py --dry --out /tmp/qcache     # CPU, tiny model

hqq (and termcolor) come as wheels carried to the device (DEVICE_READY.txt); transformers is
there. `QuantizedCache(backend="hqq", config, nbits, q_group_size=64, residual_length=128)` is
what `generate(cache_implementation="quantized", cache_config={"backend": "hqq", ...})` builds
(transformers 5.17 cache_utils.py). Each layer's update, every step, dequantizes the whole cache
(HQQ's unpack and (W_q - zero) * scale, torch ops), concatenates it with the bf16 residual and
the new token, and the attention (SDPA) runs over that bf16 copy; once the residual holds
`residual_length` tokens the whole cache is quantized again (HQQ's optimizer, 20 iterations).

Per point (model, cache, batch, context), in one JSON line of `<out>/steps.jsonl`:
- the cache is filled with random K and V: for the quantized cache, `context - residual` tokens
  quantized and `residual` (108) in the bf16 residual, so the flush falls on step 20;
- 3 warm-up steps, then `step_ms`: the median (p10, p90, all) of 12 decode steps timed with CUDA
  events (a step is generate()'s: forward one token, argmax, .item()); `device_busy_ms` and
  `kernels` per step are the profiled steps' (the union of their kernels' intervals / 2);
- 4 steps under torch.profiler (wait 1, warm-up 1, 2 recorded): `<out>/qc-*.json.gz` (CPU and
  CUDA activities, shapes: hwsim's kernel-trace path reads it);
- for the quantized cache, the flush step alone (`flush_step_ms`, CUDA events) and the mean a
  step costs over a residual period, `(127 x step_ms + flush_step_ms) / 128` (`period_step_ms`).
Points run in order of importance (batch 1 at 32k first); `--budget-s` starts none past it;
`--pack` puts the traces into at most 4 tar files of 15 MB (a device call returns 8 files).
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from capture_hf_traces import build, device_busy_ms, pack, profiled  # noqa: E402
from library_grid import (CACHES, KV_GROUP, POINTS, PROFILED, RESIDUAL, RESIDUAL_FILL, TIMED, WARM,  # noqa: E402
                          step_plan)



def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_cache(name, cfg):
    import transformers
    bits = CACHES[name]
    if bits is None:
        return transformers.DynamicCache()
    return transformers.QuantizedCache(backend="hqq", config=cfg, nbits=bits, q_group_size=KV_GROUP,
                                       residual_length=RESIDUAL)


def filled(name, cfg, batch, context, device):
    """A cache of `name` holding `context` random tokens a layer: for a quantized cache,
    `context - RESIDUAL_FILL` quantized (its first update) and RESIDUAL_FILL in the residual."""
    import torch
    cache = make_cache(name, cfg)
    heads, dim = cfg.num_key_value_heads, getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    parts = [context] if CACHES[name] is None else [context - RESIDUAL_FILL, RESIDUAL_FILL]
    for layer in range(cfg.num_hidden_layers):
        start = 0
        for n in parts:
            k = torch.randn(batch, heads, n, dim, device=device, dtype=torch.bfloat16)
            cache.update(k, torch.randn_like(k), layer, {"cache_position": torch.arange(start, start + n, device=device)})
            start += n
        del k
    return cache


def decode_step(model, cache, batch, device):
    """One decode step as generate() runs it (capture_hf_traces.decode_step's), at the position
    the cache holds: that one takes a StaticCache's from the point, which a QuantizedCache,
    growing a token a step, is not (a stale position would add a mask to every attention)."""
    import inspect

    import torch
    ids = torch.randint(0, model.config.vocab_size, (batch, 1), device=device)
    pos = torch.tensor([cache.get_seq_length()], device=device)
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, cache_position=pos, **{kw: cache})
        nxt = out.logits[:, -1].argmax(-1)
    nxt[0].item()


def timed_steps(step, n, cuda):
    """Milliseconds of `n` steps, each between two CUDA events (host time on the CPU)."""
    import torch
    out = []
    for _ in range(n):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            step()
            out.append((time.perf_counter() - t) * 1e3)
    return out


def profiled_window_ms(trace):
    """Device busy time and kernels of the recorded steps (from the first ProfilerStep on)."""
    evs = trace["traceEvents"]
    steps = sorted(e["ts"] for e in evs if str(e.get("name", "")).startswith("ProfilerStep#"))
    first = {"traceEvents": [e for e in evs if not str(e.get("name", "")).startswith("ProfilerStep#")]
             + [{"name": "ProfilerStep#0", "ts": steps[0]}]} if steps else trace
    return device_busy_ms(first)


def measure_point(model, cfg, name, cache_name, batch, context, device, cuda, out_dir):
    import torch
    t0 = time.perf_counter()
    cache = filled(cache_name, cfg, batch, context, device)
    fill_s = time.perf_counter() - t0
    step = lambda: decode_step(model, cache, batch, device)  # noqa: E731
    timed_steps(step, WARM, cuda)
    times = timed_steps(step, TIMED, cuda)
    path = os.path.join(out_dir, f"qc-{name}-{cache_name}-b{batch}-l{context}.json.gz")
    busy, kernels = profiled_window_ms(profiled(step, path, cuda, warmup=1, active=PROFILED - 2))
    recorded = PROFILED - 2
    ms = sorted(times)
    row = {"part": "step", "model": name, "cache": cache_name, "nbits": CACHES[cache_name] or 16,
           "q_group_size": KV_GROUP if CACHES[cache_name] else None,
           "residual_length": RESIDUAL if CACHES[cache_name] else None, "batch": batch,
           "context_tokens": context, "kv_tokens_first_timed": context + WARM,
           "kv_tokens_after": cache.get_seq_length(),
           "step_ms": statistics.median(ms), "p10": ms[len(ms) // 10], "p90": ms[(9 * len(ms)) // 10],
           "step_ms_all": [round(t, 4) for t in times], "device_busy_ms": busy / recorded,
           "kernels": kernels / recorded, "trace": os.path.basename(path), "fill_s": round(fill_s, 2),
           "device": torch.cuda.get_device_name() if cuda else "cpu"}
    if CACHES[cache_name]:
        flush = timed_steps(step, 1, cuda)[0]
        residual = [len(layer.keys) if layer.keys.dim() == 1 else layer.keys.shape[-2] for layer in cache.layers][:1]
        row.update(flush_step_ms=flush, residual_after_flush=residual[0],
                   period_step_ms=((RESIDUAL - 1) * row["step_ms"] + flush) / RESIDUAL)
    del cache
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="a folder: steps.jsonl and the traces")
    ap.add_argument("--dry", action="store_true", help="CPU, a tiny model of the same architecture")
    ap.add_argument("--models", default="llama-3.1-8b", help="comma-separated (capture_hf_traces.MODELS)")
    ap.add_argument("--caches", default=",".join(CACHES))
    ap.add_argument("--points", default=None, help="BxL,... (default: the six of POINTS)")
    ap.add_argument("--budget-s", type=float, default=150.0, help="start no point after this")
    ap.add_argument("--pack", action="store_true", help="tar the traces for the trip back")
    args = ap.parse_args()
    import torch
    import transformers
    cuda = torch.cuda.is_available() and not args.dry
    device = "cuda" if cuda else "cpu"
    points = ([tuple(int(v) for v in p.split("x")) for p in args.points.split(",")] if args.points
              else [(2, 256)] if args.dry else POINTS)
    rows = step_plan(args.models.split(","), args.caches.split(","), points)
    os.makedirs(args.out, exist_ok=True)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}; {len(rows)} points, "
        f"budget {args.budget_s:.0f} s")
    t0, current, model, cfg = time.perf_counter(), None, None, None
    with open(os.path.join(args.out, "steps.jsonl"), "w") as out:
        out.write(json.dumps({"part": "meta", "script": "calibration/measure_quantized_cache.py",
                              "torch": torch.__version__, "transformers": transformers.__version__,
                              "dry": args.dry, "planned_points": len(rows), "warm": WARM, "timed": TIMED,
                              "profiled": PROFILED, "residual_fill": RESIDUAL_FILL}) + "\n")
        for i, (name, batch, context, cache_name) in enumerate(rows):
            if time.perf_counter() - t0 > args.budget_s:
                out.write(json.dumps({"part": "end", "rows_skipped": len(rows) - i}) + "\n")
                log(f"budget: {len(rows) - i} points not run")
                break
            if name != current:
                model = cfg = None
                gc.collect()
                model, cfg = build(name, "eager", device, args.dry)
                current = name
            try:
                row = measure_point(model, cfg, name, cache_name, batch, context, device, cuda, args.out)
            except Exception as exc:    # out of memory, a refused backend: that point's row says so
                row = {"part": "step", "model": name, "cache": cache_name, "batch": batch,
                       "context_tokens": context, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
            out.write(json.dumps(row) + "\n")
            out.flush()
            log(json.dumps({k: v for k, v in row.items() if k != "step_ms_all"}))
        else:
            out.write(json.dumps({"part": "end", "rows_skipped": 0, "wall_s": round(time.perf_counter() - t0, 1)}) + "\n")
    if args.pack:
        pack(args.out)


if __name__ == "__main__":
    main()
