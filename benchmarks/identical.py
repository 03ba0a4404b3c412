"""Are the results the same? Every single-run scenario's summary and every validation row's
prediction, written to JSON, and compared with an earlier run's to 1e-9 relative.

    python benchmarks/identical.py --out /tmp/before.json
    python benchmarks/identical.py --out /tmp/after.json --compare /tmp/before.json

A refactor that must not change a number (issues 30 and 32) records a baseline before it
starts and compares after each step: `--compare` prints every number that differs by more
than --rtol (relative; 1e-9) and every key found on one side only, and exits 1 if any.

Scenarios: each YAML file in scenarios/ that is one run (a sweep spec, with `factors:`, is
not), made cheap by fixed overrides (two decode steps; a serving run of 8 requests), the same
for every tree compared. Validation: every row of every CSV in validation/data that is a
`hwsim validate` dataset (the kernel tables are not), through validate's own code path.
Seconds of the simulator's own wall clock are not results and are left out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RTOL = 1e-9
CHEAP_DECODE = ["workload.decode_steps=2"]
CHEAP_SERVING = ["workload.arrivals.requests=8"]
VOLATILE = {"wall_s", "started_unix", "sim_wall_s", "provenance"}   # the host's clock, not results


def scenario_files() -> list[Path]:
    """Single-run scenarios (a sweep spec names `factors:`)."""
    out = []
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if "factors" not in doc:
            out.append(path)
    return out


def cheap_overrides(path: Path) -> list[str]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    workload = doc.get("workload") or {}
    return CHEAP_SERVING if "arrivals" in workload else CHEAP_DECODE


def run_scenarios(only: str | None) -> dict:
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario
    from hwsim.pipeline import run_config

    out = {}
    for path in scenario_files():
        if only and only not in path.name:
            continue
        t = time.time()
        sets = cheap_overrides(path)
        try:
            cfg = load_scenario(path, sets)
            out[path.name] = run_config(cfg, system(cfg), every_interval=False, intervals=False).summary
        except Exception as exc:            # noqa: BLE001 - a failure is a result to compare too
            out[path.name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"  {path.name} ({' '.join(sets)}): {time.time() - t:.1f} s", file=sys.stderr)
    return out


def validation_datasets() -> list[Path]:
    from hwsim.validate import REQUIRED

    out = []
    for path in sorted((ROOT / "validation" / "data").glob("*.csv")):
        header = path.open(encoding="utf-8").readline().strip().split(",")
        if all(c in header for c in REQUIRED):
            out.append(path)
    return out


def run_validation(only: str | None, workers: int | None) -> dict:
    from hwsim.validate import load_dataset, validate_rows

    out = {}
    for path in validation_datasets():
        if only and only not in path.name:
            continue
        t = time.time()
        report = validate_rows(load_dataset(path), [], workers)
        out[path.name] = {f"{r['name']}@{i}": r for i, r in enumerate(report["rows"])}
        print(f"  {path.name}: {len(report['rows'])} rows, {time.time() - t:.1f} s", file=sys.stderr)
    return out


def differences(base, new, path: str = "") -> list[str]:
    """Every leaf that differs (numbers beyond RTOL relative), and keys on one side only."""
    if isinstance(base, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(base) | set(new), key=str):
            if key in VOLATILE:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(f"{where}: only in the baseline")
            elif key not in base:
                out.append(f"{where}: not in the baseline")
            else:
                out += differences(base[key], new[key], where)
        return out
    if isinstance(base, list) and isinstance(new, list):
        if len(base) != len(new):
            return [f"{path}: {len(base)} items, now {len(new)}"]
        return [d for i, (a, b) in enumerate(zip(base, new)) for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(base, (int, float)) and isinstance(new, (int, float)) \
            and not isinstance(base, bool) and not isinstance(new, bool):
        if base == new or (math.isnan(base) and math.isnan(new)):
            return []
        rel = abs(new - base) / max(abs(base), abs(new))
        return [f"{path}: {base!r} -> {new!r} (relative {rel:.3g})"] if rel > RTOL else []
    return [] if base == new else [f"{path}: {base!r} -> {new!r}"]


def main() -> int:
    global RTOL
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("/tmp/identical.json"))
    p.add_argument("--compare", type=Path, help="a baseline JSON written by this script")
    p.add_argument("--only", help="run only scenarios and datasets whose file name contains this")
    p.add_argument("--workers", type=int, default=None, help="validation rows side by side (default: CPUs)")
    p.add_argument("--rtol", type=float, default=RTOL)
    args = p.parse_args()
    RTOL = args.rtol
    sys.path.insert(0, str(ROOT))
    t = time.time()
    print("scenarios:", file=sys.stderr)
    result = {"scenarios": run_scenarios(args.only)}
    print("validation:", file=sys.stderr)
    result["validation"] = run_validation(args.only, args.workers)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True, default=str), encoding="utf-8")
    print(f"wrote {args.out} in {time.time() - t:.0f} s", file=sys.stderr)
    if not args.compare:
        return 0
    base = json.loads(args.compare.read_text(encoding="utf-8"))
    if args.only:        # compare only what was run
        base = {part: {k: v for k, v in base.get(part, {}).items() if k in result[part]} for part in result}
    diff = differences(base, json.loads(json.dumps(result, default=str)))
    for line in diff:
        print(line)
    n = sum(1 for _ in _leaves(result))
    print(f"{len(diff)} differences beyond {RTOL:g} relative among {n} values")
    return 1 if diff else 0


def _leaves(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


if __name__ == "__main__":
    sys.exit(main())
