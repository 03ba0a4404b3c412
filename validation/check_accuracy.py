"""Fail (exit 1) when hwsim's whole-step accuracy on the repo's H200 dataset misses its target.

    python validation/check_accuracy.py [--max-median 5] [--max-max 15]

Runs `hwsim validate` over validation/data/h200_steps.csv and checks the graph-mode rows
against issue 6's targets: median absolute error at most 5%, maximum at most 15% (eager steps
are host-bound and carry no target).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from hwsim.validate import load_dataset, validate_rows

DATA = Path(__file__).resolve().parent / "data" / "h200_steps.csv"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-median", type=float, default=5.0)
    ap.add_argument("--max-max", type=float, default=15.0)
    args = ap.parse_args()
    rows = [r for r in load_dataset(DATA) if r["launch"] == "graph"]
    report = validate_rows(rows)
    errors = [abs(r["error_pct"]) for r in report["rows"] if r["error_pct"] is not None]
    median, worst = statistics.median(errors), max(errors)
    print(f"H200 graph whole steps: {len(errors)} rows, median |error| {median:.1f}% "
          f"(bound {args.max_median}%), max {worst:.1f}% (bound {args.max_max}%), failed rows {report['failed']}")
    ok = report["failed"] == 0 and median <= args.max_median and worst <= args.max_max
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
