"""Kernel traces of this project's own measurement harness (validation/measure_steps.py), for
issue 30's check that the trace path predicts the harness as the built-in schedule does.

    python3 calibration/capture_harness_traces.py --out $OUT/harness        # on a GPU
    python3 calibration/capture_harness_traces.py --out /tmp/harness --dry  # tiny shapes, CPU

Per (model, point): the harness's decode step (per-expert loop, fixed routing, in-place KV
append, no RoPE) with its weights, cache and routing built as measure_steps.py builds them;
three warm-up steps, one profiled eager step (CPU and CUDA activities, record_shapes) written
as `harness-<model>-eager-b<B>-l<L>.json.gz`, then the unprofiled step, median of 10, in the
same process, then the same step captured as one CUDA graph and replayed (median of 10 replays,
CUDA events: `graph_ms`, what the trace predicted with `runtime.launch: graph` is held against). A row a point in `captured.jsonl` (the columns of capture_hf_traces.py, stack
`harness-eager`, `wall_ms` measured), so `validation/predict_hf_traces.py predict --traces OUT`
predicts them; compare with `hwsim run` of the same point on the built-in schedule
(`runtime.launch: eager`)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "validation"))
sys.path.insert(0, HERE)

POINTS = [(8, 4096), (1, 1024), (32, 2048)]
REPEATS = 10


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a folder: the traces and captured.jsonl")
    p.add_argument("--models", nargs="+", default=["mixtral-8x7b", "qwen3-30b-a3b"])
    p.add_argument("--dry", action="store_true", help="tiny shapes, one point, the CPU if no GPU")
    args = p.parse_args()
    import torch

    import capture_hf_traces as hf
    import measure_steps as ms
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    if not cuda and not args.dry:
        print("no GPU: run with --dry for the CPU", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    models = ms.DRY_MODELS if args.dry else ms.MODELS
    for name in args.models:
        cfg = models[name]
        weights = ms.Weights(cfg, dev)
        for batch, context in [(2, 64)] if args.dry else POINTS:
            row = measure(torch, ms, hf, weights, cfg, name, batch, context, dev, cuda, args.out)
            with open(os.path.join(args.out, "captured.jsonl"), "a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(json.dumps({k: v for k, v in row.items() if k != "wall_ms_all"}), flush=True)
        del weights
        if cuda:
            torch.cuda.empty_cache()
    return 0


def measure(torch, ms, hf, weights, cfg, name, batch, context, dev, cuda, out) -> dict:
    """One point: the profiled step's trace, then the unprofiled steps' median wall."""
    g = torch.Generator(device=dev)
    g.manual_seed(7)
    st = {"B": batch, "ctx": context, "T": 0,
          "x": torch.randn((batch, cfg["d"]), dtype=torch.bfloat16, device=dev, generator=g),
          "route": ms.make_routing(cfg, batch, dev, seed=1000 + batch),
          "cache": ms.make_cache(cfg, batch, context, dev)}

    def step():
        with torch.no_grad(), ms.run_ctx():
            ms.decode_step(weights, cfg, st)[0, 0].item()     # ends on the host, as a serving loop

    for _ in range(3):
        step()
    path = os.path.join(out, f"harness-{name}-eager-b{batch}-l{context}.json.gz")
    trace = hf.profiled(step, path, cuda)
    busy, kernels = hf.device_busy_ms(trace)
    times = []
    for _ in range(REPEATS):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    graph_ms = None
    if cuda:                  # the harness's own timing: the step as one graph (measure_steps.py)
        replays, _ = ms.time_graph(lambda: ms.decode_step(weights, cfg, st), REPEATS)
        graph_ms = statistics.median(replays)
    return {"model": name, "stack": "harness-eager", "batch": batch, "context_tokens": context,
            "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
            "trace": os.path.basename(path), "device_busy_ms": busy, "kernels": kernels,
            "profiled_step_ms": hf.profiled_step_ms(trace), "wall_ms": statistics.median(times),
            "wall_ms_all": times, "graph_ms": graph_ms}


if __name__ == "__main__":
    sys.exit(main())
