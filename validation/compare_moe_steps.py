"""Kernel-level check of the MoE schedules and weight formats inside 4-layer decode steps.

    python validation/compare_moe_steps.py [--profile h200-sxm]

Reads validation/data/h200_moe_step_kernels.csv.xz (validation/profile_moe_step.py: CUPTI kernel
durations of 4-layer steps of each variant) and the tokens each expert got in each profiled
layer (.routing.json), builds the same 4-layer step with hwsim's schedule on that exact
routing, and prints measured vs simulated device time per kind of kernel, so a whole-step
error can be traced to the kernels that cause it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hwsim import operators as mb
from hwsim.pipeline import system
from hwsim.config.scenario import Scenario
from hwsim.model.kernel import named_kernels
from hwsim.model.schedule import StepShape

DATA = Path(__file__).resolve().parent / "data" / "h200_moe_step_kernels.csv.xz"
ROUTING = DATA.parent / "h200_moe_step_kernels.routing.json"
LAYERS = 4
# (pattern in a CUDA kernel name, kind); first match wins
PROFILED = [("device_kernel", "moe_gemm"), ("_fused_moe", "moe_gemm"), ("tinygemm", "gemm"), ("nvjet", "gemm"),
            ("splitKreduce", "splitk_reduce"), ("flash_fwd", "attention"), ("layer_norm", "norm"),
            ("radixSort", "sort"), ("gatherTopK", "topk"), ("bitonicSort", "topk"), ("_align", "align"),
            ("indexSelect", "gather"), ("gather_kernel", "gather"), ("indexFunc", "scatter_add")]
SIMULATED = [(".experts.gate_up", "moe_gemm"), (".experts.down", "moe_gemm"), ("splitk_reduce", "splitk_reduce"),
             ("combine", "attention"), ("attention", "attention"), ("norm", "norm"), ("argsort", "sort"),
             ("router_topk", "topk"), ("moe_align", "align"), ("gather", "gather"), ("scatter_add", "scatter_add")]


def kind(name: str, table, default: str) -> str:
    return next((k for pat, k in table if pat in name), default)


def sim_kind(name: str) -> str:
    k = kind(name, SIMULATED, "")
    if k:
        return k
    return "gemm" if name.split(".")[-1] in ("qkv", "o_proj", "lm_head", "gate_up", "down", "router") else "other"


def simulate(case: str, counts: list[list[int]], profile: str) -> pd.DataFrame:
    model, rest = case.split("-grouped-") if "-grouped-" in case else (
        case.split("-fused-") if "-fused-" in case else case.split("-per-expert-"))
    sched = "grouped" if "-grouped-" in case else "fused" if "-fused-" in case else "per-expert"
    fmt, _, b, ctx = rest.split("-")[0], rest.split("-")[1], int(rest.split("-")[2][1:]), int(rest.split("-")[3][1:])
    data = {"hardware": profile, "model": model, "runtime": {"moe_schedule": sched},
            "workload": {"batch_size": b, "context_tokens": ctx}}
    if fmt != "bf16":
        data["weights"] = {"experts": {"format": fmt}, "attention": {"format": fmt}}
    built = system(Scenario.model_validate(data))
    built.model = built.model.model_copy(update={"layers": LAYERS})
    built.schedule.model = built.model
    k = built.model.moe.top_k
    routing = {}
    for layer, c in enumerate(counts[:LAYERS]):
        ids = np.repeat(np.arange(len(c)), c)
        routing[layer] = ids.reshape(-1, k) if ids.size % k == 0 else ids.reshape(-1, 1)
    kernels = named_kernels(built.schedule.step(StepShape("decode", b, b, ctx), routing))
    _, records = mb.time_kernels(built.chip, [x for x in kernels if hasattr(x, "tiles")])
    return pd.DataFrame({"kind": [sim_kind(r.name) for r in records],
                         "dur_us": [(r.t_end - r.t_start) * 1e6 for r in records]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm")
    args = ap.parse_args()
    prof = pd.read_csv(DATA)
    routing = json.load(open(ROUTING))
    prof["kind"] = prof.kernel.map(lambda n: kind(n, PROFILED, "other"))
    for case, grp in prof.groupby("case", sort=False):
        sim = simulate(case, routing[case], args.profile)
        m = grp.groupby("kind").dur_us.agg(["count", "sum"])
        s = sim.groupby("kind").dur_us.agg(["count", "sum"])
        t = m.join(s, how="outer", lsuffix="_measured", rsuffix="_sim").fillna(0)
        t["err_pct"] = (t.sum_sim - t.sum_measured) / t.sum_measured.replace(0, np.nan) * 100
        print(f"\n{case}: measured {grp.dur_us.sum():.0f} us in {len(grp)} kernels, "
              f"simulated {sim.dur_us.sum():.0f} us in {len(sim)} kernels (device time, no gaps)")
        print(t.round(1).to_string())


if __name__ == "__main__":
    main()
