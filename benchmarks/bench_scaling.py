"""How simulation cost grows with layers, batch, context and experts (one decode step each),
and (issue 33) with GPUs.

    python benchmarks/bench_scaling.py
    python benchmarks/bench_scaling.py --gpus 8,16,32,64 [--baseline 27865dd] [--repeat 2]

`--gpus`: scenarios/deepseek-v3-ep8.yaml (batch 64, 4 decode steps) on G GPUs with every
expert-parallel and data-parallel-attention degree set to G, in nodes of 8 (`--set
parallel.gpus=G --set parallel.ep=G --set parallel.nodes=G/8`); each row is the CPU seconds
(time.process_time: the machine is shared, so wall time says little) of run_scenario without
busy intervals (as `hwsim run` without --plots), the fastest of --repeat, in a fresh process
per run, with the same at `--baseline` beside it and whether their ITLs agree to 1e-9.

Without --gpus, each row: the factor's value, wall milliseconds per decode step, kernels per step and
microseconds per kernel. Linear growth shows as a flat last column.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from pathlib import Path

import yaml

from _trees import measure_in, worktree
from hwsim.config.load import load_scenario
from hwsim.pipeline import run_config

BASE = {"name": "scale", "source": "benchmark shape", "layers": 8, "hidden": 2048, "vocab": 32000,
        "attention": {"kind": "gqa", "heads": 16, "kv_heads": 4, "head_dim": 128},
        "moe": {"experts": 32, "top_k": 4, "expert_ffn": 1024}}


def step_cost(model: dict, *sets: str) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.yaml"
        path.write_text(yaml.safe_dump(model))
        cfg = load_scenario(None, [f"model={path}", "workload.decode_steps=4", *sets])
        t0 = time.perf_counter()
        s = run_config(cfg).summary
        return (time.perf_counter() - t0) / 4 * 1e3, s["kernels_per_step"]


def gpu_sets(gpus: int, steps: int) -> list[str]:
    return [f"parallel.gpus={gpus}", f"parallel.ep={gpus}", f"parallel.nodes={max(1, gpus // 8)}",
            f"workload.decode_steps={steps}"]


def one_gpu_run(gpus: int, steps: int) -> dict:
    cfg = load_scenario("scenarios/deepseek-v3-ep8.yaml", gpu_sets(gpus, steps))
    t0 = time.process_time()
    s = run_config(cfg, intervals=False).summary
    return {"cpu_s": time.process_time() - t0, "itl_ms": s["itl_ms"], "events": s["sim"]["events"]}


def gpu_study(args) -> None:
    gpus = [int(g) for g in args.gpus.split(",")]
    script = str(Path(__file__).resolve())
    trees = {"now": None, **({f"at {args.baseline}": args.baseline} if args.baseline else {})}
    best: dict = {}
    with contextlib.ExitStack() as stack:
        paths = {label: stack.enter_context(worktree(rev)) for label, rev in trees.items()}
        for g in gpus:
            for _ in range(max(1, args.repeat)):
                for label, tree in paths.items():        # alternately: the same minute for both
                    got = measure_in(tree, script, ["--one-gpus", str(g), "--steps", str(args.steps)])
                    if (g, label) not in best or got["cpu_s"] < best[g, label]["cpu_s"]:
                        best[g, label] = got
    print(f"DeepSeek-V3, batch 64, {args.steps} decode steps; CPU seconds, fastest of {args.repeat}")
    print(f"{'GPUs':>5}" + "".join(f"{label:>14}" for label in trees) + f"{'ITL p50 (ms)':>16}{'same':>6}")
    for g in gpus:
        rows = [best[g, label] for label in trees]
        same = all(abs(r["itl_ms"][k] - rows[0]["itl_ms"][k]) <= 1e-9 * abs(rows[0]["itl_ms"][k])
                   for r in rows for k in rows[0]["itl_ms"])
        print(f"{g:>5}" + "".join(f"{r['cpu_s']:>14.2f}" for r in rows)
              + f"{rows[0]['itl_ms']['p50']:>16.6f}{'yes' if same else 'NO':>6}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", help="comma-separated GPU counts: the many-GPU study (issue 33)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--baseline", metavar="REV", help="also measure hwsim as of this git revision")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--one-gpus", type=int, help=argparse.SUPPRESS)     # one run, as JSON
    args = ap.parse_args()
    if args.one_gpus:
        print(json.dumps(one_gpu_run(args.one_gpus, args.steps)))
    elif args.gpus:
        gpu_study(args)
    else:
        factor_study()


def factor_study():
    print(f"{'factor':>10} {'value':>8} {'ms/step':>9} {'kernels':>8} {'us/kernel':>10}")
    studies = [
        ("layers", [2, 4, 8, 16, 32], lambda v: ({**BASE, "layers": v}, [])),
        ("batch", [1, 4, 16, 64], lambda v: (BASE, [f"workload.batch_size={v}"])),
        ("context", [1024, 8192, 65536], lambda v: (BASE, [f"workload.context_tokens={v}"])),
        ("experts", [8, 32, 128], lambda v: ({**BASE, "moe": {**BASE["moe"], "experts": v}},
                                             ["workload.batch_size=16"])),
    ]
    for name, values, make in studies:
        for v in values:
            model, sets = make(v)
            ms, kernels = step_cost(model, *sets)
            print(f"{name:>10} {v:>8} {ms:>9.1f} {kernels:>8} {ms * 1e3 / kernels:>10.1f}")


if __name__ == "__main__":
    main()
