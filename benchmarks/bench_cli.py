"""CLI speed: the wall time of whole `hwsim` commands, end to end (interpreter start, imports,
simulation, bundle), each next to the same command at a baseline git revision, in one run.

    python benchmarks/bench_cli.py [--baseline REV] [--repeat 3] [--only run-default,...]

Issue 19's figures: `run-default` (`hwsim run`, the default scenario with its bundle; at most
1.5 s; since the figures are drawn on request, its tables and manifest), `run-plots` (the
same with `--plots`: its figures too, as every `hwsim run` drew them before; a baseline
without the flag runs without it), `validate-14` (`hwsim validate` of validation/data/h200_steps_extra.csv, 13 cases and
its header: 14 rows; at most 3 s), `run-deepseek-b64` (DeepSeek-V3 at batch 64 with its
bundle; at most 10 s) and, on request, `run-voice-10k` (10,000 voice-agent requests; at most
60 s); `run-voice-agent` is the serving bundle of scenarios/voice-agent.yaml; `version`
(`hwsim --version`, at most 0.1 s: issue 33).

Bundles write their files side by side only where a CPU is idle (hwsim/io/forked.py), so on a
busy machine the figures of both revisions are of files written in turn.

The machine is shared and its speed moves by tens of percent from minute to minute, so the two
revisions are run alternately (now, baseline, now, ...) and each figure is the fastest of
`--repeat` runs, of wall and of CPU time (the process and its children) alike. The baseline (by
default BEFORE, the tree before issue 19's items 4 and 5 were worked on; `--baseline none` for no
baseline) runs from a temporary export of that revision (PYTHONPATH and the working folder
point at it). Not a pass/fail test: it prints numbers, and the speed-up.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import ROOT, export, run_timed  # noqa: E402

COMMANDS = {
    "version": ["--version"],
    "run-default": ["run", "--out", "{out}"],
    "run-plots": ["run", "--plots", "--out", "{out}"],
    "validate-14": ["validate", "validation/data/h200_steps_extra.csv", "--json"],
    # one H200 cannot hold DeepSeek-V3 (671 GB): the what-if overcommit keeps it on one GPU
    "run-deepseek-b64": ["run", "--set", "model=deepseek-v3", "--set", "workload.batch_size=64",
                         "--set", "parallel.allow_overcommit=true", "--out", "{out}"],
    "run-voice-agent": ["run", "scenarios/voice-agent.yaml", "--out", "{out}"],
    # issue 19's serving scale: 10,000 requests of the voice-agent mix, from the CLI without
    # flags (before the cost estimate counted shapes it was refused: --max-wall-s lets the
    # baseline run); about a minute each, so not in the default list
    "run-voice-10k": ["run", "scenarios/voice-agent.yaml", "--set", "workload.arrivals.requests=10000",
                      "--max-wall-s", "1e9", "--out", "{out}"],
}
BEFORE = "8aaa547"      # main as this work is based on: the same numerics, without it
DEFAULT = ("version", "run-default", "run-plots", "validate-14", "run-deepseek-b64", "run-voice-agent")
TARGETS_S = {"version": 0.1, "run-default": 1.5, "validate-14": 3.0, "run-deepseek-b64": 10.0, "run-voice-10k": 60.0}


def time_command(tree: Path, args: list[str], out: Path) -> tuple[float, float]:
    """Wall and CPU seconds (the process and its children) of the `hwsim ARGS` command run with
    `tree` as the hwsim it imports: its console script's module (hwsim.launch since issue 33,
    hwsim.cli before)."""
    if '"--plots"' not in (tree / "hwsim" / "cli.py").read_text():
        args = [a for a in args if a != "--plots"]     # before the flag: every run drew its figures
    module = "hwsim.launch" if (tree / "hwsim" / "launch.py").exists() else "hwsim.cli"
    argv = [sys.executable, "-m", module, *(a.format(out=out) for a in args)]
    done, wall, cpu = run_timed(argv, tree)
    if done.returncode not in (0, 1):         # validate exits 1 when a row fails: still timed
        raise SystemExit(f"{' '.join(argv)} (in {tree}) exited {done.returncode}: "
                         f"{done.stderr.strip()[-500:]}")
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", metavar="REV", default=BEFORE,
                    help=f"also time hwsim as of this git revision (default {BEFORE}; 'none': no baseline)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default=",".join(DEFAULT), help="comma-separated figures: "
                    + ", ".join(COMMANDS))
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(COMMANDS)
    if unknown:
        ap.error(f"unknown figure(s) {sorted(unknown)}")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        if args.baseline == "none":
            args.baseline = None
        if args.baseline:
            trees[f"before ({args.baseline})"] = export(args.baseline, Path(tmp) / "base")
        trees["now"] = ROOT
        best = {kind: {name: {label: float("inf") for label in trees} for name in names} for kind in ("wall", "CPU")}
        for name in names:
            for i in range(max(1, args.repeat)):
                for label, tree in trees.items():          # alternate: same minute, both revisions
                    out = Path(tmp) / f"out-{len(label)}-{i}"
                    for kind, secs in zip(("wall", "CPU"), time_command(tree, COMMANDS[name], out)):
                        best[kind][name][label] = min(best[kind][name][label], secs)
    width = {label: max(14, len(label) + 2) for label in trees}
    speedup = len(trees) > 1
    for kind in ("wall", "CPU"):
        print(f"{kind + ' seconds (fastest of ' + str(args.repeat) + ')':32}"
              + "".join(f"{l:>{width[l]}}" for l in trees) + (f"{'speed-up':>10}" if speedup else "")
              + f"{'target':>10}")
        for name in names:
            target = TARGETS_S.get(name) if kind == "wall" else None
            times = [best[kind][name][l] for l in trees]
            print(f"{name:32}" + "".join(f"{t:>{width[l]}.2f}" for l, t in zip(trees, times))
                  + (f"{times[0] / times[-1]:>9.1f}x" if speedup else "")
                  + (f"{target:>10.1f}" if target else f"{'-':>10}"))

if __name__ == "__main__":
    main()
