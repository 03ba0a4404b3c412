"""hwsim's HF graphs attention kernels against the profiled Qwen3-30B-A3B graphs replay on the H100
(issue 43; validation/data/hf_serving/h100_call_s21/qwen3_graphs_profile_kernels.json), per kernel
class, at the replay's shape: 16 decodes padded to 64 query rows, their KV read padded to 16,384
(SDPA over 64 x 16,448), 48 layers.

    python validation/hf_replay_classes.py [--decodes 16 --context 600]

Classes (the measured kernels' names): the memory-efficient SDPA (fmha_cutlassF, 48 a replay);
element-wise direct copies (elementwise_kernel<128, 4> direct_copy, 144 a replay: repeat_kv's K
and V and the query's .contiguous(), 3 a layer); the KV writes (index_copy_, 96). The whole
replay: the step clock's device time of the decode step (the rest of the pass on its grid).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwsim.config.load import load_scenario
from hwsim.model.paged_sdpa import PackedShape, stack_kernels
from hwsim.model.schedule import StepShape
from hwsim.pipeline import system
from hwsim.serving.engine_host import EngineHost, load_engine_host
from hwsim.serving.step_clock import StepClock
from hwsim.step import PassPlan

PROFILE = Path(__file__).resolve().parent / "data" / "hf_serving" / "h100_call_s21" / "qwen3_graphs_profile_kernels.json"
SCENARIO = str(Path(__file__).resolve().parents[1] / "scenarios" / "engines" / "hf-llama-chat.yaml")
GRAPHS = ["workload.engine.config.use_cuda_graph=true", "workload.engine.config.use_async_batching=true"]
CLASSES = {  # class: (measured kernel name holds, hwsim kernel name holds)
    "memory-efficient SDPA (its lone-block factor derived here)": (("fmha_cutlassF",), (".sdpa",)),
    "direct copies (repeat_kv K, V; query)": (("elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
                                               "at::native::direct_copy_kernel_cuda",),
                                              ("_repeat", ".q_copy")),
    "KV writes (index_copy_)": (("index_copy_kernel_impl",), ("_write",)),
}


def measured() -> dict:
    prof = json.loads(PROFILE.read_text())
    out = {"replay": (None, prof["ms_per_replay"])}
    for cls, (names, _) in CLASSES.items():
        rows = [r for r in prof["per_replay"] if all(n in r["kernel"] for n in names)]
        out[cls] = (sum(r["calls"] for r in rows), sum(r["ms"] for r in rows))
    return out


def predicted(decodes: int, context: int) -> dict:
    b = system(load_scenario(SCENARIO, ["model=qwen3-30b-a3b", "hardware=h100-sxm", *GRAPHS]))   # graph launches
    sched = b.schedule
    prof = load_engine_host("hf-transformers-h200")
    host = EngineHost(prof, sched.model.layers, cuda_graph=True)
    host.padding = (64, 16384, 8192, 467 * 256)          # the profiled engine's config (profile_summary.jsonl)
    p = PackedShape(64, 64 + 16384, True, host.sdpa_share(), host.sdpa_lone())
    items = stack_kernels(sched, p)
    out = {}
    for cls, (_, names) in CLASSES.items():
        sub = [k for k in items if any(n in k.name for n in names)]
        b.env.run()
        plan = PassPlan({}, sched._walked(sub, sched.cold_state().l2))
        res = b.gpus.simulate(b, StepShape("prefill", 1, p.q, 0, packed=p), -1, None, False, plan, False)
        out[cls] = (len(sub), res.duration_s * 1e3)
    clock = StepClock(b, host=host, packed=True)
    batch = [(1, context)] * decodes
    kv = sum(n + c for n, c in batch)       # hf.py _padding: the padded rows as one more sequence
    out["replay"] = (None, clock.time(batch, [(64 - decodes, 16384 + 64 - kv - (64 - decodes))]).device_s * 1e3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decodes", type=int, default=16)
    ap.add_argument("--context", type=int, default=600)
    args = ap.parse_args()
    meas, pred = measured(), predicted(args.decodes, args.context)
    print("| class | calls meas / hwsim | ms a replay meas / hwsim |\n|---|---|---|")
    for cls in [*CLASSES, "replay"]:
        (mc, mm), (pc, pm) = meas[cls], pred[cls]
        calls = f"{mc:.0f} / {pc}" if mc is not None else "-"
        print(f"| {cls} | {calls} | {mm:.1f} / {pm:.1f} ({pm / mm - 1:+.0%}) |")


if __name__ == "__main__":
    main()
