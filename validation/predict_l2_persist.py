"""hwsim's prediction for calibration/measure_l2_persist.py, written before the measurement.

The brief's expert SRAM on a Hopper GPU is the L2's persisting share: hwsim reads an expert
GEMM's resident weights from the L2 (`weights_on_chip`, docs/moe.md) at the L2's bandwidth
instead of streaming them from HBM. The measurement runs P expert GEMMs of Qwen3-30B-A3B's
shape (gate_up: x[B, 2048] @ W[1536, 2048]^T, bf16) back to back in one CUDA graph, with the
weights cold in HBM (the L2 flushed before each replay), warm in the L2 (no flush), and held
by an access-policy window as persisting lines while the flush streams 512 MB past them. hwsim
predicts the first with the weights in HBM and the other two with them on chip; and the same
weights as one GEMM (x[B, 2048] @ W[6144, 2048]^T), one kernel's device time.

    python validation/predict_l2_persist.py [--hardware h200-sxm] [--out validation/data/l2_persist_h200/predictions.jsonl]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model import ops
from hwsim.operators import GEMM_WEIGHT_ADDR, device_time_s, time_kernels

HIDDEN, GATE_UP = 2048, 1536         # Qwen3-30B-A3B: hidden 2048, expert_ffn 768 (gate and up)
BATCHES = (1, 4, 16, 64)
EXPERTS = 4                          # 4 x 6.3 MB = 25 MB: under the H200's persisting share (37.5 MB)


def seconds(chip: ChipSpec, shape: str, batch: int, on_chip: float, device_only: bool = False) -> float:
    """`graph`: the EXPERTS GEMMs of one replay, back to back as a CUDA graph launches them
    (`device_only`: their kernels' device time, as the profiler sums it); `one`: their weights
    as one GEMM, its device time (the events around one kernel)."""
    nbytes = HIDDEN * GATE_UP * 2
    if shape == "one":
        kernels = ops.gemm("experts.gate_up", 0, batch, HIDDEN, EXPERTS * GATE_UP, chip,
                           weight_addr=GEMM_WEIGHT_ADDR, weight_bytes=2, data=Component.EXPERT_READ,
                           weights_on_chip=on_chip)
        return device_time_s(chip, kernels)
    kernels = []
    for e in range(EXPERTS):
        kernels += ops.gemm(f"expert{e}.gate_up", 0, batch, HIDDEN, GATE_UP, chip,
                            weight_addr=GEMM_WEIGHT_ADDR + e * nbytes, weight_bytes=2,
                            data=Component.EXPERT_READ, weights_on_chip=on_chip)
    if device_only:
        return device_time_s(chip, kernels)
    t, _ = time_kernels(chip, kernels, launch="graph")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", default="h200-sxm")
    ap.add_argument("--device-time", action="store_true", help="the kernels' device time alone")
    ap.add_argument("--out", type=Path, default=Path("validation/data/l2_persist_h200/predictions.jsonl"))
    a = ap.parse_args()
    chip = ChipSpec.from_profile(load_profile(a.hardware))
    rows = []
    if a.device_time:        # the kernels' device time alone (measure_l2_persist.py --profile)
        for shape in ("graph", "one"):
            for batch in (1, 16, 64):
                cold, on_chip = (seconds(chip, shape, batch, w, device_only=True) for w in (0.0, 1.0))
                rows.append({"batch": batch, "experts": EXPERTS, "shape": shape, "cold_us": cold * 1e6,
                             "on_chip_us": on_chip * 1e6, "speedup": cold / on_chip})
                print(rows[-1])
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return
    for shape in ("graph", "one"):
        for batch in BATCHES:
            cold, on_chip = seconds(chip, shape, batch, 0.0), seconds(chip, shape, batch, 1.0)
            rows.append({"batch": batch, "experts": EXPERTS, "shape": shape, "cold_us": cold * 1e6,
                         "on_chip_us": on_chip * 1e6, "speedup": cold / on_chip})
            print(f"{shape:<5} B={batch:>3}: cold {cold * 1e6:7.1f} us, on chip {on_chip * 1e6:7.1f} us, "
                  f"x{cold / on_chip:.2f}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
