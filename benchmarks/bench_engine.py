"""Engine speed: simulated tokens and events per wall second, next to SimPy's raw event rate.

    python benchmarks/bench_engine.py [--steps 100] [--scenario scenarios/default.yaml]
        [--fidelity tile|wave] [--set KEY=VALUE ...] [--repeat 3] [--baseline REV]

`--baseline REV` measures the same benchmark, in the same run, on hwsim as of git revision
REV (a temporary worktree), and prints both: e.g. `--baseline 347256b`, the engine before
devices, streams and the sharing arbiter (issue 14). Issue 14's figures: the default step
(`--steps 100`, at most 20 ms a step) and 1,000 Mixtral batch-8 steps (`--steps 1000 --set
workload.batch_size=8`, at most 20 s).

Issue 8's figures: `--steps 100` (the default step), `--steps 1000 --set
workload.batch_size=8` (1,000 Mixtral batch-8 steps), `--steps 3 --fidelity tile`. The
machine's speed moves by 10-30% from run to run, so `--repeat N` reports the fastest of N.

Not a pass/fail test: it prints numbers. SimPy's raw rate is measured in the same process
(a chain of bare timeouts), so the ratio says how much of the engine's time is SimPy itself.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import simpy

from hwsim.config.load import load_scenario
from hwsim.pipeline import run_config


def simpy_raw_rate(n: int = 200_000) -> float:
    env = simpy.Environment()

    def ticker():
        for _ in range(n):
            yield env.timeout(1)

    env.process(ticker())
    t0 = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--scenario", default=None)
    ap.add_argument("--fidelity", default=None, choices=["tile", "wave"])
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--baseline", metavar="REV", help="also measure hwsim as of this git revision")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    figures = measure(args)
    if args.json:
        print(json.dumps(figures))
        return
    base = baseline(args.baseline, sys.argv[1:]) if args.baseline else None
    report(figures, base, args.baseline)


def baseline(rev: str, argv: list[str]) -> dict:
    """The same benchmark (this file) run on hwsim as of `rev`, in a temporary worktree."""
    root = Path(__file__).resolve().parents[1]
    argv = [a for i, a in enumerate(argv) if a != "--baseline" and (i == 0 or argv[i - 1] != "--baseline")]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
        try:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run([sys.executable, __file__, *argv, "--json"], cwd=tree, env=env,
                                 capture_output=True, text=True, check=True).stdout
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False)
    return json.loads(out.strip().splitlines()[-1])


def measure(args) -> dict:
    sets = [f"workload.decode_steps={args.steps}", *args.sets]
    if args.fidelity:
        sets.append(f"runtime.fidelity={args.fidelity}")
    cfg = load_scenario(args.scenario, sets)
    raw = simpy_raw_rate()
    wall = float("inf")
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        result = run_config(cfg)
        wall = min(wall, time.perf_counter() - t0)
    s = result.summary
    return {"scenario": f"{cfg.name} ({cfg.model} on {cfg.hardware}, batch {cfg.workload.batch_size}, "
                        f"fidelity {cfg.runtime.fidelity})",
            "steps": args.steps, "wall_s": wall, "ms_per_step": wall / args.steps * 1e3,
            "tokens_per_s": s["sim"]["simulated_tokens"] / wall, "events": s["sim"]["events"],
            "kernels": s["sim"].get("kernels"), "replayed_kernels": s["sim"].get("replayed_kernels"),
            "itl_p50_ms": s["itl_ms"]["p50"], "simpy_raw_per_s": raw,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def report(now: dict, base: dict | None, rev: str | None) -> None:
    print(f"scenario            {now['scenario']}, {now['steps']} decode steps")
    rows = [("wall (s)", "wall_s", "{:.3f}"), ("ms per decode step", "ms_per_step", "{:.2f}"),
            ("simulated tokens/s", "tokens_per_s", "{:,.1f}"), ("SimPy events", "events", "{}"),
            ("kernels", "kernels", "{}"), ("replayed kernels", "replayed_kernels", "{}"),
            ("ITL p50 (ms)", "itl_p50_ms", "{:.6f}"), ("SimPy raw timeouts/s", "simpy_raw_per_s", "{:,.0f}"),
            ("peak RSS (MiB)", "peak_rss_mib", "{:.0f}")]
    head = f"{'':22}{'now':>16}" + (f"{'at ' + rev:>16}" if base else "")
    print(head)
    for label, key, fmt in rows:
        line = f"{label:22}{_fmt(fmt, now.get(key)):>16}"
        if base:
            line += f"{_fmt(fmt, base.get(key)):>16}"
        print(line)


def _fmt(fmt: str, value) -> str:
    return "-" if value is None else fmt.format(value)


if __name__ == "__main__":
    main()
