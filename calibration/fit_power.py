"""Fit the H200 power model (hwsim/hw/power.py) to the power samples measured on the H200.

    python calibration/fit_power.py            # prints the fit; writes calibration/data/fit_power.txt

Inputs (both measured by the repo's own scripts, held steady for 4 s each):
- calibration/data/h200_power.jsonl (calibration/measure_power.py): a 2 GiB copy, an 8192^3
  bf16 GEMM on random data, an 8-row decode GEMM and a 512-row prefill GEMM; the idle board.
- validation/data/h200_step_clocks.jsonl and h200_step_clocks_2.jsonl (validation/probe_clocks.py):
  *cal* rows of the generalisation grid and rows of the first grid (validation/data/h200_steps.csv)
  replayed for 4 s (no test row is looked at).

Each sample gives one equation: its steady board power = idle + clock x^3 + (x_t^2 tensor flops
x e_tensor + x^2 L2 bytes x e_l2) / T + HBM bytes x e_hbm / T (x_t: the tensor clock's share of
its own limit, hwsim/hw/power.py), where the flops and bytes are what
hwsim counts for that work (activity_of its kernels) and T is the *measured* time per call.
x is the SM clock relative to the maximum, as hwsim sees it: for a sample at the power limit,
the clock at which hwsim's simulated time equals the measured one (the smi clock readings are
instantaneous and noisy: 1335-1695 MHz within a second); under the limit, 1. Idle is the
measured idle board (clock-gated); the other four coefficients are a least-squares fit.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwsim import operators as mb                            # noqa: E402
from hwsim import validate as V                              # noqa: E402
from hwsim.pipeline import system                                # noqa: E402
from hwsim.config.load import load_profile                   # noqa: E402
from hwsim.hw.chip import ChipSpec                           # noqa: E402
from hwsim.hw.power import Activity, activity_of             # noqa: E402
from hwsim.step import simulate_pass                         # noqa: E402

POWER = ROOT / "calibration/data/h200_power.jsonl"
STEP_CLOCKS = [ROOT / "validation/data/h200_step_clocks.jsonl", ROOT / "validation/data/h200_step_clocks_2.jsonl"]
DATASETS = [ROOT / "validation/data/h200_general.csv", ROOT / "validation/data/h200_steps.csv"]
AT_LIMIT_W = 650       # a sample drawing more than this is held at the limit (700 W) by the clock
GIB = 2 ** 30


def watts_of(sample: str) -> float:
    return float(sample.split(",")[-1].split()[0])


def steady_watts(samples: list) -> float:
    """Mean of the last half of a 4 s record (the first second is the power reading's ramp)."""
    texts = [s[1] if isinstance(s, list) else s for s in samples]
    return statistics.fmean(watts_of(s) for s in texts[len(texts) // 2:])


def settled_x(time_at, slowdown: float) -> float:
    """The clock ratio at which the simulated time grows by the measured `slowdown` (steady time
    over unthrottled time) from its time at the maximum clock (bisection). Matching the ratio,
    not the time, keeps the model's own error at the maximum clock out of the clock."""
    lo, hi = 0.3, 1.0
    target = time_at(hi) * slowdown
    if slowdown <= 1.0:
        return 1.0
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if time_at(mid) > target else (lo, mid)
    return (lo + hi) / 2


def microbench_rows(chip: ChipSpec) -> list[dict]:
    rows = []
    shapes = {"gemm 8192^3 bf16 random": (8192, 8192, 8192),
              "decode gemm x[8,4096] @ W[28672,4096]^T": (8, 4096, 28672),
              "prefill gemm x[512,4096] @ W[28672,4096]^T": (512, 4096, 28672)}
    records = [json.loads(line) for line in open(POWER)]
    zeros = next(r for r in records if r.get("workload") == "gemm 8192^3 bf16 zeros")
    for r in records:
        name = r.get("workload")
        if not name or "zeros" in name:     # zeros toggle nothing: not the data a model holds
            continue
        watts = steady_watts(r["samples"])
        per_call_s = r["seconds"] / r["calls"]
        if name.startswith("copy"):
            work = Activity(hbm_bytes=2 * 2 * GIB)       # 2 GiB read and 2 GiB written
            x = 1.0
        else:
            kernels = mb.gemm_kernels(chip, *shapes[name])
            work = activity_of(kernels)
            time_at = lambda x: mb.device_time_s(chip.at_sm_clock(chip.clock_hz * x), kernels)  # noqa: E731
            # unthrottled: the same GEMM on zeros (under the limit, at the tensor clock's own
            # limit) where measured, else the model's time at the maximum clock
            free_s = (zeros["seconds"] / zeros["calls"] if name == "gemm 8192^3 bf16 random"
                      else time_at(1.0))
            x = settled_x(time_at, per_call_s / free_s) if watts > AT_LIMIT_W else 1.0
        rows.append({"name": name, "watts": watts, "x": x, "seconds": per_call_s, "work": work})
    return rows


def step_rows() -> list[dict]:
    grid = {r["name"]: r for path in DATASETS for r in V.load_dataset(path)}
    rows = []
    for line in (line for path in STEP_CLOCKS for line in open(path)):
        r = json.loads(line)
        if r.get("part") == "meta":
            continue
        row = grid[r["case"]]
        assert row.get("split", "cal") == "cal", r["case"]     # the fit never looks at a test row
        watts = steady_watts(r["samples"])
        replays = r["replay_ms"]
        measured_s = statistics.median(replays[len(replays) // 2:]) * 1e-3
        # before the limit takes hold: the fastest of the first replays (the very first also pays
        # a cold start; a long step is throttled from its second replay on)
        free_s = min(replays[:4]) * 1e-3
        cfg, shape = V._row_scenario(row, V.row_overrides(row))
        cfg = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(
            update={"kernel_records": 0, "sm_clock": "max"})})
        max_hz = system(cfg).chip.clock_hz
        passes = {}

        def simulate(x):
            if x not in passes:
                b = system(cfg, sm_clock_hz=max_hz * x)
                b.env.run()
                passes[x] = simulate_pass(b, shape, 0, None)
            return passes[x]
        x = settled_x(lambda x: simulate(x).duration_s, measured_s / free_s) if watts > AT_LIMIT_W else 1.0
        rows.append({"name": r["case"], "watts": watts, "x": x, "seconds": measured_s,
                     "work": simulate(x).activity})
    return rows


def main() -> None:
    chip = ChipSpec.from_profile(load_profile("h200-sxm"))
    x_tensor = lambda x: min(x * chip.clock_hz, chip.tensor_clock_hz) / chip.tensor_clock_hz   # noqa: E731
    idle = next(watts_of(json.loads(line)["smi"]) for line in open(POWER)
                if json.loads(line).get("part") == "idle")
    rows = microbench_rows(chip) + step_rows()
    a = np.array([[r["x"] ** 3,
                   x_tensor(r["x"]) ** 2 * r["work"].tensor_flops / r["seconds"] * 1e-12,
                   r["x"] ** 2 * r["work"].l2_bytes / r["seconds"] * 1e-12,
                   r["work"].hbm_bytes / r["seconds"] * 1e-12] for r in rows])
    b = np.array([r["watts"] - idle for r in rows])
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    clock_w, tensor_pj, l2_pj, hbm_pj = coef
    lines = [f"idle_w {idle:.1f} (measured, clock-gated)",
             f"clock_w {clock_w:.1f}", f"tensor_pj_per_flop {tensor_pj:.3f}",
             f"l2_pj_per_byte {l2_pj:.1f}", f"hbm_pj_per_byte {hbm_pj:.1f}", "",
             f"{'sample':45s} {'x':>6s} {'measured W':>11s} {'model W':>8s}"]
    for r, fitted in zip(rows, a @ coef + idle):
        lines.append(f"{r['name']:45s} {r['x']:6.3f} {r['watts']:11.1f} {fitted:8.1f}")
    text = "\n".join(lines)
    print(text)
    (ROOT / "calibration/data/fit_power.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
