"""How simulation cost grows with layers, batch, context and experts (one decode step each).

    python benchmarks/bench_scaling.py

Each row: the factor's value, wall milliseconds per decode step, kernels per step and
microseconds per kernel. Linear growth shows as a flat last column.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import yaml

from hwsim.config.load import load_scenario
from hwsim.run import run_scenario

BASE = {"name": "scale", "source": "benchmark shape", "layers": 8, "hidden": 2048, "vocab": 32000,
        "attention": {"kind": "gqa", "heads": 16, "kv_heads": 4, "head_dim": 128},
        "moe": {"experts": 32, "top_k": 4, "expert_ffn": 1024}}


def step_cost(model: dict, *sets: str) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.yaml"
        path.write_text(yaml.safe_dump(model))
        cfg = load_scenario(None, [f"model={path}", "workload.decode_steps=4", *sets])
        t0 = time.perf_counter()
        s = run_scenario(cfg).summary
        return (time.perf_counter() - t0) / 4 * 1e3, s["kernels_per_step"]


def main():
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
