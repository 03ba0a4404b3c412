"""A real engine's serving run, simulated: how much faster than the engine serving it for real,
and what the step clock's shape buckets cost in accuracy.

    python benchmarks/bench_serving_engine.py [--scenario scenarios/engines/hf-llama-chat.yaml]
        [--requests 200] [--set KEY=VALUE ...] [--bucket-error 60]

Prints, for HF transformers continuous batching (workload.engine.kind hf-transformers):
- startup: importing torch and transformers and building the engine (paid once per run);
- the run: wall seconds of run_scenario (engine scheduler + step clock + summary), its steps per
  wall second, and the simulated makespan, which is how long the real engine would take to serve
  the same requests (first arrival to last token);
- speed: makespan / wall, with and without the startup (target: >= 100x, issue 43 item 6);
- `--bucket-error N`: N steps of the run, each timed as the step clock times it (interpolated
  between grid passes, hwsim/serving/step_clock.py), as the built-in loop's bucket would (rounded
  up), and from its exact shape (a pass of those very decodes, context and prompt tokens): the
  device time's relative error, and the step wall's.
Not a pass/fail test: it prints numbers (the machine's speed moves 10-30% between runs).
"""

from __future__ import annotations

import argparse
import math
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="scenarios/engines/hf-llama-chat.yaml")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--bucket-error", type=int, default=0, metavar="N")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers.generation.continuous_batching.continuous_api  # noqa: F401
    imports = time.perf_counter() - t0
    from hwsim.config.load import load_scenario
    from hwsim.run import run_scenario
    cfg = load_scenario(args.scenario, [f"workload.arrivals.requests={args.requests}", *args.set])
    t1 = time.perf_counter()
    result = run_scenario(cfg)
    wall = time.perf_counter() - t1
    s = result.run_summary
    e = s.serving.engine
    makespan = s.serving.makespan_s
    print(f"{cfg.model} on {cfg.hardware}, {e.kind} {e.version}, {args.requests} requests "
          f"({cfg.workload.arrivals.kind} {cfg.workload.arrivals.rate_per_s:g}/s)")
    print(f"  import torch + transformers: {imports:.1f} s (once per process)")
    print(f"  run_scenario: {wall:.2f} s wall, {e.steps} engine steps ({e.steps / wall:,.0f} steps/s), "
          f"{e.bucket_shapes} shape buckets simulated")
    print(f"  simulated makespan (the real engine's serving time): {makespan:.1f} s")
    print(f"  speed: {makespan / wall:.1f}x real time; with the imports {makespan / (wall + imports):.1f}x")
    print(f"  TTFT p50 {s.ttft_ms['p50']:.1f} ms, ITL p50 {s.itl_ms['p50']:.1f} ms, "
          f"E2E mean {s.serving.e2e_ms['mean']:.0f} ms, {s.serving.throughput_tok_s:.1f} tok/s")
    if args.bucket_error:
        bucket_error(cfg, result, args.bucket_error)
    return 0


def bucket_error(cfg, result, n: int) -> None:
    """Steps of the run timed as the step clock times them (interpolated between grid passes)
    and from their exact shape (a pass of that very shape), and as the built-in loop's bucket
    (rounded up: hwsim/serving/loop.py shape_key) for comparison."""
    from hwsim.build import build
    from hwsim.serving.loop import StepOracle
    from hwsim.serving.step_clock import StepClock

    b = build(cfg)
    clock, bucket = StepClock(b), StepOracle(b)
    its = result.iterations
    pick = its[:: max(1, len(its) // n)][:n]
    errs = {"grid": [], "bucket": [], "grid wall": []}
    for it in pick:
        sb = it.batch
        exact = clock.corner(sb.decodes, math.ceil(sb.mean_context), sb.prefill_tokens, sb.prefill_sequences)
        dx = exact.host.device_busy_s
        dg = clock.device(sb)[0]
        db = bucket.time(sb.decodes, sb.mean_context, sb.prefill_tokens, sb.prefill_sequences).host.device_busy_s
        errs["grid"].append(abs(dg - dx) / dx)
        errs["bucket"].append(abs(db - dx) / dx)
        host = max(0.0, it.duration_s - dg)          # the step's wall beyond its device time
        errs["grid wall"].append(abs(dg - dx) / (host + dx))
    print(f"  over {len(pick)} steps of the run, against each step's exact shape:")
    for k, v in errs.items():
        v.sort()
        print(f"    {k:>9}: median {v[len(v) // 2]:.2%}, p90 {v[int(0.9 * (len(v) - 1))]:.2%}, max {v[-1]:.2%}")


if __name__ == "__main__":
    raise SystemExit(main())
