"""The six Qwen3-30B-A3B verification steps an H100 measured in session 18 (the call got an H100,
not the H200 validation/spec_grid.md predicted for; these are hwsim's H100 predictions made AFTER
the measurement, with no change to hwsim in between: post hoc, not fitted).

    python validation/compare_spec_h100.py [validation/data/spec_steps_h100/h100_spec_steps.csv]
"""

import csv
import statistics
import sys
from pathlib import Path

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario

HERE = Path(__file__).resolve().parent


def predict(model: str, batch: int, context: int, queries: int) -> float:
    cfg = load_scenario(None, ["hardware=h100-sxm", f"model={model}", f"workload.batch_size={batch}",
                               f"workload.context_tokens={context}", "workload.decode_steps=4",
                               "workload.speculative.method=mtp", f"workload.speculative.tokens={queries - 1}",
                               "workload.speculative.acceptance=0"])
    return run_config(cfg, system(cfg), intervals=False).summary["speculative"]["verify_ms_per_step"]


DATA = HERE / "data/spec_steps_h100/h100_spec_steps.csv"


def rows(path: Path = DATA):
    """(case name, measured ms, hwsim ms) of each measured verification step."""
    for r in csv.DictReader(path.open()):
        q = int(r["name"].split("-q")[1].split("-")[0])
        yield r["name"], float(r["measured_ms"]), predict(r["model"], int(r["batch"]), int(r["context_tokens"]), q)


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA
    errs = []
    print("| case | measured ms | hwsim ms | error |\n|---|---:|---:|---:|")
    for name, m, p in rows(path):
        errs.append(p / m - 1)
        print(f"| {name} | {m:.2f} | {p:.2f} | {p / m - 1:+.1%} |", flush=True)
    print(f"median |error| {statistics.median(map(abs, errs)):.1%}, max {max(map(abs, errs)):.1%}")


if __name__ == "__main__":
    main()
