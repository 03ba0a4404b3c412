"""Fit cuDNN's Q > 1 (verification) SDPA kernel's latency chain on the H100 sweep, and score
hwsim's kernel on the cases held out.

    python calibration/fit_cudnn_verify.py          # > calibration/data/fit_cudnn_verify_h100.txt

calibration/data/h100_cudnn_verify.jsonl.xz (calibration/measure_cudnn_verify.py, session 21):
cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128 over batch 1/8,
512-8192 cached tokens, Q 2/5/8, with the additive mask or none, K/V expanded or GQA. At batch 1
(32 programs, one per query head) its time is a line in the 128-key blocks, the same for GQA and
expanded K/V: a program's blocks in sequence, not its bytes. Three slopes make the chain (the
profile's cudnn_fprop block, in SM cycles at the profile's clock, the sweep's 1980 MHz):
K/V alone (maskless rows), and what the mask adds on 4-byte aligned rows (an even key count:
Q = 2, 8) and on 2-byte aligned ones (odd: Q = 5). The intercept is not fitted: hwsim's own
round trips and kernel costs stand for it.

FIT: batch 1 at 512, 1024 and 4096 cached tokens (36 rows). HELD OUT: batch 1 at 2048 and 8192
(24 rows) and every batch-8 row (60: a persistent grid of 132 programs, two rounds, and where K/V
are expanded the load pipe's queueing under 132 programs streaming HBM), none used by the fit.
"""

from __future__ import annotations

import json
import lzma
import math
import statistics
from pathlib import Path

import numpy as np

from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec
from hwsim.model.multi_query_attention import CUDNN_FPROP_BLOCK_N, multi_query_attention
from hwsim.operators import GEMM_WEIGHT_ADDR, device_time_s

DATA = Path(__file__).resolve().parent / "data" / "h100_cudnn_verify.jsonl.xz"
FIT_CONTEXTS = {512, 1024, 4096}
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def rows() -> list[dict]:
    with lzma.open(DATA, "rt") as f:
        out = [json.loads(line) for line in f]
    return [r for r in out if r["part"] == "cudnn_verify"]


def is_fit(r: dict) -> bool:
    return r["B"] == 1 and r["context"] in FIT_CONTEXTS


def measured_us(r: dict) -> float:
    (k,) = r["kernels"]
    return k["us"]


def slope_us_per_block(rs: list[dict]) -> float:
    blocks = [math.ceil(r["keys"] / CUDNN_FPROP_BLOCK_N) for r in rs]
    return float(np.polyfit(blocks, [measured_us(r) for r in rs], 1)[0])


def fit_cycles(rs: list[dict], clock_hz: float) -> dict[str, float]:
    """The chain's three per-block costs in cycles, from the fit rows' slopes."""
    fit = [r for r in rs if is_fit(r)]
    kv = slope_us_per_block([r for r in fit if not r["mask"]])
    paired = slope_us_per_block([r for r in fit if r["mask"] and r["keys"] % 2 == 0])
    unpaired = slope_us_per_block([r for r in fit if r["mask"] and r["keys"] % 2 == 1])
    cyc = lambda us: us * 1e-6 * clock_hz     # noqa: E731
    return {"key_block_cycles": cyc(kv), "mask_block_cycles_paired": cyc(paired - kv),
            "mask_block_cycles_unpaired": cyc(unpaired - kv)}


def predicted_us(chip: ChipSpec, r: dict) -> float:
    kv_heads = HEADS if r["expanded_kv"] else KV_HEADS
    ks = multi_query_attention("attention", 0, r["B"], HEADS, kv_heads, r["Q"], HEAD_DIM, HEAD_DIM, r["keys"],
                               2 * HEAD_DIM * 2, GEMM_WEIGHT_ADDR, chip.sizes, "cudnn", mask=r["mask"])
    return device_time_s(chip, ks) * 1e6


def score(label: str, errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"{label}: {len(a)} rows, median |error| {statistics.median(a):.1f}%, max {max(a):.1f}%"


def main() -> None:
    chip = ChipSpec.from_profile(load_profile("h100-sxm"))
    rs = rows()
    fitted = fit_cycles(rs, chip.clock_hz)
    print("fitted (cycles a 128-key block at", chip.clock_hz / 1e6, "MHz):",
          ", ".join(f"{k} {v:.0f}" for k, v in fitted.items()))
    print("profile (h100-sxm cudnn_fprop):", chip.cudnn_fprop_cycles)
    print("\n| B | context | Q | mask | K/V | set | measured us | hwsim us | error |")
    print("|---:|---:|---:|---|---|---|---:|---:|---:|")
    errs: dict[bool, list[float]] = {True: [], False: []}
    for r in rs:
        m, p = measured_us(r), predicted_us(chip, r)
        e = 100 * (p / m - 1)
        errs[is_fit(r)].append(e)
        print(f"| {r['B']} | {r['context']} | {r['Q']} | {'yes' if r['mask'] else 'no'} | "
              f"{'expanded' if r['expanded_kv'] else 'GQA'} | {'fit' if is_fit(r) else 'held out'} | "
              f"{m:.1f} | {p:.1f} | {e:+.1f}% |")
    print()
    print(score("fit", errs[True]))
    print(score("held out", errs[False]))


if __name__ == "__main__":
    main()
