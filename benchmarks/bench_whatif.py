"""Sensitivity speed (issue 34): the default scenario's sensitivity over every sourced number
of its hardware profile (49 with its scenario keys: 98 perturbed runs and the base run).

    python benchmarks/bench_whatif.py [--workers N] [--no-replay]

Prints the wall time (goal: <= 10 s on 2 cores), the runs, and how many replayed the base
run's plans. --no-replay rebuilds every run's plans (what the replay saves). Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import time

from hwsim.whatif import reuse
from hwsim.whatif.numbers import load_base, profile_numbers
from hwsim.whatif.sensitivity import sensitivity


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--no-replay", action="store_true")
    args = ap.parse_args()
    if args.no_replay:
        reuse.SharedPlans.for_profile = lambda self, profile: None
    base = load_base(None, [])
    keys = [n.key for n in profile_numbers(base.profile)]
    t0 = time.perf_counter()
    result, _ = sensitivity(base, keys=keys, workers=args.workers)
    wall = time.perf_counter() - t0
    plans = "rebuilt" if args.no_replay else "replayed where they hold"
    print(f"sensitivity of {base.cfg.name} over {len(keys)} profile numbers: {result['runs']} runs in "
          f"{wall:.2f} s (workers {args.workers}, plans {plans}); "
          f"{len(result['rows'])} ranked, {len(result['no_effect'])} no effect, {len(result['failed'])} not run")


if __name__ == "__main__":
    main()
