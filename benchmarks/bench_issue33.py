"""Issue 33's serving-trace and power-limit figures, each against a baseline revision in the
same run (the many-GPU figure: bench_scaling.py --gpus).

    python benchmarks/bench_issue33.py [--baseline 27865dd] [--only trace,power]
        [--requests 10000,100000] [--repeat 1]

- `trace`: the Azure-like trace of the issue: Qwen3-30B-A3B on one H200, Poisson 4 req/s,
  prompts uniform in 32-3072 tokens, replies uniform in 1-1024 (scenarios/serving-poisson.yaml
  with those --set), at each --requests: CPU seconds of run_scenario, peak RSS, and p50/p99
  TTFT and ITL with their relative difference to the baseline (the counts' random stream
  differs: within statistics, 1% asked). The scenario's batching (32 sequences, 2,048 tokens an
  iteration) is overloaded at this rate; `--set workload.max_batch_size=256 --set
  workload.token_budget=8192` keeps up with it (TTFT p50 about 0.1 s) and simulates about
  1,100 distinct shapes in 2,000 requests.
- `power`: the default scenario (Mixtral-8x7B) at batch 128 and 256, 1k context, where the
  700 W limit binds: CPU seconds of the throttled run (runtime.sm_clock: settled) against the
  same run locked at the maximum clock (one simulation), and whether the results equal the
  baseline's; then each tree's ratio of the two (item 4's figure: <= 1.3x).

CPU time (time.process_time) rather than wall: the machine is shared. Each run is a fresh
process; the figure is the fastest of --repeat.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import time
from pathlib import Path

from _trees import measure_in, worktree

TRACE = ["model=qwen3-30b-a3b", "workload.prompt.kind=uniform", "workload.prompt.low=32",
         "workload.prompt.high=3072", "workload.output.kind=uniform", "workload.output.low=1",
         "workload.output.high=1024"]
POWER = ["workload.context_tokens=1024"]


def one_run(scenario: str | None, sets: list[str]) -> dict:
    from hwsim.config.load import load_scenario
    from hwsim.pipeline import run_config
    cfg = load_scenario(scenario, sets)
    t0 = time.process_time()
    s = run_config(cfg, intervals=False).summary
    out = {"cpu_s": time.process_time() - t0, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "itl_ms": s["itl_ms"], "power": s.get("power")}
    if s.get("ttft_ms"):
        out["ttft_ms"] = s["ttft_ms"]
        out["shapes"] = s["serving"]["iteration_shapes_simulated"]
    return out


def cases(args) -> list[tuple[str, str | None, list[str]]]:
    out = []
    if "trace" in args.only:
        out += [(f"trace {n:,} requests", "scenarios/serving-poisson.yaml",
                 TRACE + args.sets + [f"workload.arrivals.requests={n}"]) for n in map(int, args.requests.split(","))]
    if "power" in args.only:
        for batch in (128, 256):
            sets = POWER + [f"workload.batch_size={batch}"]
            out += [(f"power batch {batch}, settled", None, sets),
                    (f"power batch {batch}, max clock", None, sets + ["runtime.sm_clock=max"])]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="27865dd", help="git revision to compare with ('none': no baseline)")
    ap.add_argument("--only", default="trace,power")
    ap.add_argument("--requests", default="10000")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="more overrides of the trace's scenario, e.g. workload.max_batch_size=256")
    ap.add_argument("--one", help=argparse.SUPPRESS)          # one run, as JSON: scenario|sets
    args = ap.parse_args()
    if args.one:
        scenario, *sets = json.loads(args.one)
        print(json.dumps(one_run(scenario, sets)))
        return
    trees = {"now": None, **({args.baseline: args.baseline} if args.baseline != "none" else {})}
    script = str(Path(__file__).resolve())
    best: dict = {}
    with contextlib.ExitStack() as stack:
        paths = {label: stack.enter_context(worktree(rev)) for label, rev in trees.items()}
        for name, scenario, sets in cases(args):
            for _ in range(max(1, args.repeat)):
                for label, tree in paths.items():
                    got = measure_in(tree, script, ["--one", json.dumps([scenario, *sets])])
                    if (name, label) not in best or got["cpu_s"] < best[name, label]["cpu_s"]:
                        best[name, label] = got
            report(name, [best[name, label] for label in trees], list(trees))
        for batch in (128, 256) if "power" in args.only else ():     # item 4's figure
            settled, top = f"power batch {batch}, settled", f"power batch {batch}, max clock"
            ratios = [f"{label} {best[settled, label]['cpu_s'] / best[top, label]['cpu_s']:.2f}x" for label in trees]
            print(f"power batch {batch}: settled / max clock " + ", ".join(ratios))


def report(name: str, rows: list[dict], labels: list[str]) -> None:
    line = f"{name:34}" + "".join(f"{label:>10} {r['cpu_s']:7.3f} s {r['rss_mb']:6.0f} MB"
                                  for label, r in zip(labels, rows))
    now = rows[0]
    figures = [("ITL", "itl_ms")] + ([("TTFT", "ttft_ms")] if "ttft_ms" in now else [])
    for label, key in figures:
        line += f"  {label} p50/p99 {now[key]['p50']:.3f}/{now[key]['p99']:.3f} ms"
        if len(rows) > 1:
            base = rows[1][key]
            line += " ({:+.2%}/{:+.2%})".format(now[key]["p50"] / base["p50"] - 1, now[key]["p99"] / base["p99"] - 1)
    if now.get("shapes"):
        line += f"  {now['shapes']} shapes"
    if now.get("power"):
        line += f"  clock {now['power']['sm_clock_mhz']:.1f} MHz"
    print(line, flush=True)


if __name__ == "__main__":
    main()
