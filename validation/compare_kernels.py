"""Kernel-level check: simulated vs profiled device time per kind of kernel.

    python validation/compare_kernels.py [--profile h200-sxm]

Reads validation/data/h200_kernels.csv (CUPTI durations of the measured schedule with 4
layers, from validation/profile_step.py) and simulates the same 4-layer cases. Prints, per
case and kernel kind, the kernel count and total device microseconds on both sides, so a
whole-step error can be traced to the kernels that cause it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from hwsim.build import build
from hwsim.config.scenario import Scenario
from hwsim.model.schedule import StepShape
from hwsim.step import simulate_pass

DATA = [Path(__file__).resolve().parent / "data" / f for f in ("h200_kernels.csv", "h200_kernels_extra.csv")]
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
SIMULATED_KINDS = [("splitk_reduce", "splitk_reduce"), ("combine", "attn_combine"),
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
    model, rest = case.split("-decode-") if "-decode-" in case else case.split("-prefill-")
    phase = "decode" if "-decode-" in case else "prefill"
    b, l, t = (int(x[1:]) for x in rest.split("-"))
    return model, phase, b, l, t


def simulate_case(case: str, profile: str) -> pd.DataFrame:
    model, phase, b, l, t = parse_case(case)
    cfg = Scenario.model_validate({"hardware": profile, "model": model,
                                   "workload": {"batch_size": b, "context_tokens": max(l, 1)}})
    built = build(cfg)
    built.model = built.model.model_copy(update={"layers": LAYERS})
    built.schedule.model = built.model
    shape = StepShape("decode", b, b, l) if phase == "decode" else StepShape("prefill", 1, t, 0)
    records = []
    simulate_pass(built, shape, 0, records)
    return pd.DataFrame({"kind": [kind_of(r.name, SIMULATED_KINDS) for r in records],
                         "dur_us": [(r.t_end - r.t_start) * 1e6 for r in records]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm")
    args = ap.parse_args()
    prof = pd.concat([pd.read_csv(p) for p in DATA], ignore_index=True)
    prof["kind"] = prof.kernel.map(lambda n: kind_of(n, PROFILED_KINDS))
    for case, grp in prof.groupby("case", sort=False):
        sim = simulate_case(case, args.profile)
        m = grp.groupby("kind").dur_us.agg(["count", "sum"])
        s = sim.groupby("kind").dur_us.agg(["count", "sum"])
        table = m.join(s, how="outer", lsuffix="_measured", rsuffix="_sim").fillna(0)
        table["err_pct"] = (table.sum_sim - table.sum_measured) / table.sum_measured.replace(0, np.nan) * 100
        print(f"\n{case}: measured {grp.dur_us.sum():.0f} us in {len(grp)} kernels, "
              f"simulated {sim.dur_us.sum():.0f} us in {len(sim)} kernels (device time, no gaps)")
        print(table.round(1).to_string())


if __name__ == "__main__":
    main()
