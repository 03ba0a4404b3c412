"""Start-up (issue 33, item 5): the median wall of whole `hwsim` commands, each a fresh process.

    python benchmarks/bench_startup.py [--repeat 9] [--tree PATH] [--only version,no-plots,run]

- `version`: `hwsim --version` (target 0.1 s)
- `no-plots`: `hwsim run --no-plots --out DIR` (the default scenario, its bundle without figures)
- `run`: `hwsim run --out DIR` (the default run: the bundle with breakdown.png; target 0.25 s)
- `json`: `hwsim run --json --no-plots` (no bundle; printed summary)
- `floor`: no hwsim at all: the interpreter importing the libraries every run needs (numpy,
  PyYAML and SimPy, named by the user; pydantic for the scenario's schema; typer for the
  command line), what a `hwsim run` cannot go under
- `floor-figure`: the same and matplotlib's Agg canvas (what drawing breakdown.png needs)

The command is the console script's entry point (hwsim.launch:main) run by this interpreter,
`python -c "from hwsim.launch import main; main()" ARGS` with PYTHONPATH at --tree (default:
this checkout), so that neither pyenv's shell shim nor the installed copy is timed. The
environment's PYTHONDONTWRITEBYTECODE is dropped for these runs (the first run of each command
writes the tree's __pycache__), as an installed hwsim has its modules compiled: with it set,
Python compiles hwsim's ~80 modules from source on every run (about 0.1 s of CPU); `--source`
keeps it, to time that case. Each
figure is the median of --repeat runs, the commands taken in turn (version, no-plots, run,
version, ...) so that a change in the machine's load falls on all of them alike; the minimum
is printed beside it, and the median CPU seconds (the command and its children: the plotting
helper). Wall times: on a shared machine, read them with the load average printed. The
plotting helper is forked only where the load average leaves a CPU idle (hwsim.io.forked),
so on a loaded machine the default run draws in its own process, one step after the other.
Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "version": ["--version"],
    "no-plots": ["run", "--no-plots", "--out", "{out}"],
    "run": ["run", "--out", "{out}"],
    "json": ["run", "--json", "--no-plots"],
    "floor": ["floor"],
    "floor-figure": ["floor-figure"],
}
# imports only, no hwsim: the floor under any `hwsim run` built on these libraries
FLOORS = {
    "floor": "import numpy, yaml, simpy, pydantic, typer",
    "floor-figure": "import numpy, yaml, simpy, pydantic, typer, matplotlib.figure, "
                    "matplotlib.backends.backend_agg",
}
TARGETS_S = {"version": 0.1, "run": 0.25}
KEEP_ENV_BYTECODE = False
ENTRY = "import sys; sys.argv[0] = 'hwsim'; from hwsim.launch import main; sys.exit(main())"


def time_once(tree: Path, args: list[str], scratch: Path, i: int) -> tuple[float, float]:
    """Wall and CPU seconds (the process and its children: the plotting helper) of one command."""
    if args and args[0] in FLOORS:
        argv = [sys.executable, "-c", FLOORS[args[0]]]
    else:
        argv = [sys.executable, "-c", ENTRY] + [a.replace("{out}", str(scratch / f"r{i}")) for a in args]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if not KEEP_ENV_BYTECODE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)      # as an installed hwsim runs: from its .pyc files
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"hwsim {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose hwsim is timed")
    ap.add_argument("--only", default="version,no-plots,run")
    ap.add_argument("--source", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE if set: hwsim compiled from source on every run")
    a = ap.parse_args()
    global KEEP_ENV_BYTECODE
    KEEP_ENV_BYTECODE = a.source
    names = [n for n in a.only.split(",") if n]
    walls: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for n in names:             # one unrecorded run each: files cached, .pyc written
            time_once(a.tree, COMMANDS[n], scratch, -1 - names.index(n))
        for i in range(a.repeat):
            for n in names:
                wall, cpu = time_once(a.tree, COMMANDS[n], scratch, i * len(names) + names.index(n))
                walls[n].append(wall)
                cpus[n].append(cpu)
    compiled = "from source" if a.source and os.environ.get("PYTHONDONTWRITEBYTECODE") else ".pyc cached"
    print(f"tree {a.tree}, {a.repeat} runs each ({compiled}), load average {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    print(f"{'command':<13} {'wall median':>12} {'wall min':>9} {'CPU median':>11} {'target':>8}")
    for n in names:
        target = f"{TARGETS_S[n]:.2f} s" if n in TARGETS_S else ""
        print(f"{n:<13} {statistics.median(walls[n]):>10.3f} s {min(walls[n]):>7.3f} s "
              f"{statistics.median(cpus[n]):>9.3f} s {target:>8}")


if __name__ == "__main__":
    main()
