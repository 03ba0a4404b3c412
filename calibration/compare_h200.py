"""Hold the h200-sxm profile against the H200 microbenchmarks, row by row.

    python calibration/compare_h200.py [--profile h200-sxm] [--data PATH.jsonl ...]

Prints measured vs simulated time for every GEMM, streaming copy, decode-attention and launch
row, then the median and max absolute error per part. Only rows that stream from HBM are used
(buffers larger than the L2), since the whole-step schedule streams weights and KV from HBM.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from hwsim import microbench as mb
from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = [HERE.parent.parent / "shared" / "calibration" / "h200_microbench.jsonl",
                HERE / "data" / "h200_microbench_extra.jsonl"]
L2_BYTES = 60e6


def rows(paths):
    for p in paths:
        if Path(p).exists():
            for line in open(p):
                yield json.loads(line)


def simulate(chip: ChipSpec, r: dict) -> float | None:
    part = r["part"]
    if part in ("gemm", "gemm_ctas"):
        return mb.gemm_s(chip, r["m"], r["k"], r["n"])
    if part == "memory" and r["op"] == "copy" and r["mb"] * 2**20 > 4 * L2_BYTES:
        return mb.copy_s(chip, r["mb"] * 2**20)
    if part == "attention" and r["impl"] == "sdpa_bf16" and r["kv_bytes"] > L2_BYTES:
        return mb.decode_attention_s(chip, r["B"], r["L"], r["H"], r["KVH"], r["D"])
    if part == "launch":
        return mb.tiny_kernel_s(chip)
    return None


def measured_s(r: dict) -> float:
    if r["part"] == "launch":
        return r["graph_us_per_kernel"] * 1e-6
    return r["ms"] * 1e-3


def label(r: dict) -> str:
    if r["part"] in ("gemm", "gemm_ctas"):
        return f"gemm {r['name']} m={r['m']}"
    if r["part"] == "memory":
        return f"copy {r['mb']} MiB"
    if r["part"] == "attention":
        return f"sdpa B={r['B']} L={r['L']}"
    return "launch (graph, tiny kernel)"


def compare(chip: ChipSpec, paths) -> dict[str, list[float]]:
    errors: dict[str, list[float]] = {}
    for r in rows(paths):
        sim = simulate(chip, r)
        if sim is None:
            continue
        meas = measured_s(r)
        err = (sim - meas) / meas * 100
        errors.setdefault(r["part"], []).append(err)
        print(f"{label(r):34s} measured {meas * 1e6:9.2f} us  simulated {sim * 1e6:9.2f} us  {err:+6.1f}%")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm")
    ap.add_argument("--data", nargs="*", default=[str(p) for p in DEFAULT_DATA])
    args = ap.parse_args()
    chip = ChipSpec.from_profile(load_profile(args.profile))
    errors = compare(chip, args.data)
    for part, errs in errors.items():
        abs_errs = [abs(e) for e in errs]
        print(f"{part:10s} rows {len(errs):3d}  median |err| {statistics.median(abs_errs):5.1f}%  "
              f"max |err| {max(abs_errs):5.1f}%")


if __name__ == "__main__":
    main()
