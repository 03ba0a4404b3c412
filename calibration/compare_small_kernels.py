"""Hold the schedule's small kernels against their H200 measurements, row by row.

    python calibration/compare_small_kernels.py [--profile h200-sxm] [--json]

Reads calibration/data/h200_small_kernels.jsonl (calibration/measure_small_kernels.py: the
per-expert element-wise and index kernels on their in-step layouts at 1-1024 rows, and
FlashAttention decode over batch x context) and h200_blocks_sweep.jsonl (the strided ones at
0.5-48 blocks per SM; ops `*_sweep`) and simulates each with the kernels the default
schedule itself builds (hwsim.model.schedule), so what is checked is what the whole-step
prediction uses. Prints measured vs simulated device time per row and the median and max
absolute error per op.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from hwsim import operators as mb
from hwsim.config.load import load_model, load_profile
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model import ops
from hwsim.model.schedule import Schedule

DATA = Path(__file__).resolve().parent / "data" / "h200_small_kernels.jsonl"
# FlashAttention-2 forced and PyTorch's default choice (cuDNN) at the shared calibration's SDPA
# shapes (measure_small_kernels.py --backends)
BACKENDS = DATA.parent / "h200_attention_backends.jsonl"
# the strided SiLU, multiply and scale at 0.5-48 blocks per SM (measure_small_kernels.py
# --blocks-sweep, measured after Kernel.alu_chain was set: a test of its shape)
SWEEP = DATA.parent / "h200_blocks_sweep.jsonl"
# measured op -> suffix of the kernel the schedule's per-expert block builds for it
EXPERT_KERNEL = {"index_select": ".gather", "silu_gate_half": ".silu", "mul_up_half": ".mul",
                 "scale_rows": ".scale", "index_add": ".scatter_add"}


def expert_kernel(schedule: Schedule, op: str, rows: int):
    ks = schedule._expert(0, "expert0", rows, schedule.model.moe.expert_ffn, Component.EXPERT_READ,
                          gather=True)
    return next(k for k in ks if k.name.endswith(EXPERT_KERNEL[op]))


def device_us(kernels: list, reps: int = 1) -> float:
    """Measured device time of one issue of the op: every kernel it launched, per repetition."""
    return sum(k["us"] * k["count"] for k in kernels) / reps


def compare(chip: ChipSpec, path: Path) -> list[dict]:
    schedules: dict[str, Schedule] = {}
    out = []
    for line in (*open(path), *open(BACKENDS), *(open(SWEEP) if SWEEP.exists() else ())):
        r = json.loads(line)
        if r["part"] == "blocks_sweep":
            if r["model"] not in schedules:
                schedules[r["model"]] = Schedule(load_model(r["model"]), chip)
            k = expert_kernel(schedules[r["model"]], r["op"], r["rows"])
            out.append({"op": f"{r['op']}_sweep", "case": f"{r['model']} {r['blocks_per_sm']} blocks/SM",
                        "measured_us": device_us(r["kernels"], reps=max(k["count"] for k in r["kernels"])),
                        "simulated_us": mb.device_time_s(chip, [k]) * 1e6})
        elif r["part"] == "small_kernel":
            if r["model"] not in schedules:
                schedules[r["model"]] = Schedule(load_model(r["model"]), chip)
            k = expert_kernel(schedules[r["model"]], r["op"], r["rows"])
            meas = device_us(r["kernels"], reps=max(k["count"] for k in r["kernels"]))
            out.append({"op": r["op"], "case": f"{r['model']} rows={r['rows']}", "measured_us": meas,
                        "simulated_us": mb.device_time_s(chip, [k]) * 1e6})
        elif r["part"] in ("decode_attention", "decode_attention_backend"):
            cudnn = r.get("backend") == "default"      # PyTorch picked cuDNN for every such row
            ks = ops.decode_attention("attention", 0, r["B"], r["H"], r["KVH"], r["D"], r["D"], r["L"] + 1,
                                      2 * r["D"] * 2, mb.GEMM_WEIGHT_ADDR, chip,
                                      library="cudnn" if cudnn else "flash")
            out.append({"op": "cudnn_decode_attention" if cudnn else "decode_attention",
                        "case": f"{r.get('model', 'mixtral-8x7b')} B={r['B']} L={r['L']}",
                        "measured_us": device_us(r["kernels"], r["reps"]),
                        "simulated_us": mb.device_time_s(chip, ks) * 1e6})
    for row in out:
        row["error_pct"] = 100.0 * (row["simulated_us"] / row["measured_us"] - 1.0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    chip = ChipSpec.from_profile(load_profile(args.profile))
    rows = compare(chip, Path(args.data))
    if args.json:
        print(json.dumps(rows))
        return
    for r in rows:
        print(f"{r['op']:17s} {r['case']:28s} measured {r['measured_us']:9.2f} us  "
              f"simulated {r['simulated_us']:9.2f} us  {r['error_pct']:+6.1f}%")
    for op in dict.fromkeys(r["op"] for r in rows):
        errs = [abs(r["error_pct"]) for r in rows if r["op"] == op]
        print(f"{op:17s} rows {len(errs):3d}  median |err| {statistics.median(errs):5.1f}%  "
              f"max |err| {max(errs):5.1f}%")
    errs = [abs(r["error_pct"]) for r in rows]
    print(f"{'all':17s} rows {len(errs):3d}  median |err| {statistics.median(errs):5.1f}%  "
          f"max |err| {max(errs):5.1f}%")


if __name__ == "__main__":
    main()
