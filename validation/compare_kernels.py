"""Kernel-level check: simulated vs profiled device time per kind of kernel.

    python validation/compare_kernels.py [--profile h200-sxm] [--data CSV ...]

Reads validation/data/h200_kernels*.csv (CUPTI durations of the measured schedule with 4
layers, from validation/profile_step.py; `--data validation/data/h200_general_kernels.csv.xz` for
validation/profile_general.py's) and simulates the same 4-layer cases, each with the scenario
overrides its whole-step row was measured with (validation/data/h200_general.csv). Prints, per
case and kernel kind, the kernel count and total device microseconds on both sides, so a
whole-step error can be traced to the kernels that cause it.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import numpy as np
import pandas as pd

from hwsim.pipeline import system
from hwsim.config.scenario import Scenario
from hwsim.engine.records import RecordLog
from hwsim.model.schedule import StepShape
from hwsim.step import simulate_pass

DATA = [Path(__file__).resolve().parent / "data" / f for f in ("h200_kernels.csv", "h200_kernels_extra.csv.xz")]
LAYERS = 4

# (pattern in the profiled CUDA kernel name, kind); first match wins
PROFILED_KINDS = [("layer_norm", "norm"), ("splitKreduce", "splitk_reduce"), ("nvjet", "gemm"),
                  ("xmma", "gemm"), ("gemm", "gemm"), ("splitkv_combine", "attn_combine"),
                  ("flash_fwd", "attention"), ("indexSelect", "gather"), ("gather_kernel", "gather"),
                  ("indexFunc", "scatter_add"), ("silu", "silu"), ("FillFunctor", "zero"),
                  ("softmax", "softmax"), ("CUDAFunctor_add", "add"), ("MulFunctor", "mul"),
                  ("direct_copy", "copy"), ("BinaryFunctor", "mul"), ("Memset", "zero")]
# the profiler truncates names, so the strided gate x up product and the router-weight scale
# (both BinaryFunctor multiplies) are one kind, "mul", on both sides
# (suffix of a simulated kernel name, kind)
SIMULATED_KINDS = [("splitk_reduce", "splitk_reduce"), ("_copy", "copy"), ("combine", "attn_combine"),
                   ("attention", "attention"), ("norm", "norm"), ("gather", "gather"),
                   ("scatter_add", "scatter_add"), ("silu", "silu"), ("moe_zero", "zero"),
                   ("router_softmax", "softmax"), ("residual_add", "add"), (".mul", "mul"),
                   ("router_cast", "copy"), ("_write", "copy"), (".scale", "mul")]


def kind_of(name: str, table) -> str:
    for pat, kind in table:
        if pat in name:
            return kind
    return "gemm" if table is SIMULATED_KINDS else "other"


def parse_case(case: str):
    """model, phase, batch, context, prompt of profile_step.py's `model-decode-b1-l512-t0` or
    measure_general.py's `model-decode-b1-l512-graph` / `model-prefill-t512-graph`."""
    model, rest = case.split("-decode-") if "-decode-" in case else case.split("-prefill-")
    phase = "decode" if "-decode-" in case else "prefill"
    fields = {x[0]: int(x[1:]) for x in rest.split("-") if x[:1] in "blt" and x[1:].isdigit()}
    return model, phase, fields.get("b", 1), fields.get("l", 0), fields.get("t", 0)


@functools.lru_cache(maxsize=1)
def general_rows() -> dict[str, dict]:
    """validation/data/h200_general.csv's rows by name, read once."""
    from hwsim.validate import load_dataset
    general = Path(__file__).resolve().parent / "data" / "h200_general.csv"
    return {r["name"]: r for r in load_dataset(general)} if general.exists() else {}


def row_overrides(case: str) -> list[str]:
    """The overrides the whole-step row of this case was measured with (none if it has no row)."""
    from hwsim.validate import row_overrides as of_row
    rows = general_rows()
    return of_row(rows[case]) if case in rows else []


def simulate_case(case: str, profile: str) -> pd.DataFrame:
    from hwsim.config.load import apply_overrides
    from hwsim.config.yaml_lines import LoadedYaml
    model, phase, b, l, t = parse_case(case)
    data = {"hardware": profile, "model": model, "workload": {"batch_size": b, "context_tokens": max(l, 1)}}
    apply_overrides(data, row_overrides(case), LoadedYaml({}, {}, "--set"))
    cfg = Scenario.model_validate(data)
    built = system(cfg)
    built.model = built.model.model_copy(update={"layers": LAYERS})
    built.schedule.model = built.model
    shape = StepShape("decode", b, b, l) if phase == "decode" else StepShape("prefill", 1, t, 0)
    records = RecordLog()
    simulate_pass(built, shape, 0, records)
    return pd.DataFrame({"kind": [kind_of(r.name, SIMULATED_KINDS) for r in records],
                         "dur_us": [(r.t_end - r.t_start) * 1e6 for r in records]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm")
    ap.add_argument("--data", nargs="*", type=Path, default=DATA)
    args = ap.parse_args()
    prof = pd.concat([pd.read_csv(p) for p in args.data], ignore_index=True)
    prof["kind"] = prof.kernel.map(lambda n: kind_of(n, PROFILED_KINDS))
    for case, grp in prof.groupby("case", sort=False):
        sim = simulate_case(case, args.profile)
        m = grp.groupby("kind").dur_us.agg(["count", "sum"])
        s = sim.groupby("kind").dur_us.agg(["count", "sum"])
        table = m.merge(s, how="outer", left_index=True, right_index=True, suffixes=("_measured", "_sim")).fillna(0)
        table["err_pct"] = (table.sum_sim - table.sum_measured) / table.sum_measured.replace(0, np.nan) * 100
        print(f"\n{case}: measured {grp.dur_us.sum():.0f} us in {len(grp)} kernels, "
              f"simulated {sim.dur_us.sum():.0f} us in {len(sim)} kernels (device time, no gaps)")
        print(table.round(1).to_string())


if __name__ == "__main__":
    main()
