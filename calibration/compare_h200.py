"""Hold the h200-sxm profile against the H200 microbenchmarks, row by row: operator level.

    python calibration/compare_h200.py [--profile h200-sxm] [--data PATH.jsonl ...] [--json]

Prints measured vs simulated time for every streaming copy, launch, decode-attention and GEMM
row, then the median and max absolute error per part and over every row. Only rows that stream
from HBM are used (buffers larger than the L2), since the whole-step schedule streams weights
and KV from HBM.

GEMMs are held against their CUPTI device times (calibration/data/h200_gemm_kernels.jsonl),
not against the host-timed GEMM rows of the microbenchmark files: those time one call with
CUDA events and include 3-6 us of launch and event overhead at small m (same shapes, both
ways), which a kernel's device time does not. The small kernels and FlashAttention decode
come from calibration/compare_small_kernels.py (CUPTI too). The shared files' sdpa_bf16 rows
let PyTorch choose the attention backend, which picks cuDNN, not the flash kernel the measured
schedule forces (measured both ways, h200_attention_backends.jsonl); they are held against
hwsim's cuDNN model and listed apart ("cudnn_attention_host_timed": one call timed with CUDA
events, so a few microseconds of overhead sit in the small ones).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from hwsim import operators as mb
from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec
from hwsim.model import ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_small_kernels  # noqa: E402

HERE = Path(__file__).resolve().parent
GEMM_DEVICE_TIMES = HERE / "data" / "h200_gemm_kernels.jsonl"
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
    if part == "gemm_kernels":
        return mb.device_time_s(chip, mb.gemm_kernels(chip, r["m"], r["k"], r["n"]))
    if part == "memory" and r["op"] == "copy" and r["mb"] * 2**20 > 4 * L2_BYTES:
        return mb.copy_s(chip, r["mb"] * 2**20)
    if part == "attention" and r["impl"] == "sdpa_bf16" and r["kv_bytes"] > L2_BYTES:
        # PyTorch's default backend here is cuDNN (h200_attention_backends.jsonl)
        return mb.decode_attention_s(chip, r["B"], r["L"], r["H"], r["KVH"], r["D"], library="cudnn")
    if part == "sdpa" and r.get("kind") == "prefill_causal":
        return mb.device_time_s(chip, [ops.prefill_attention("attention", 0, r["T"], r["H"], r["KVH"],
                                                             r["D"], r["D"], chip)])
    if part == "launch":
        return mb.tiny_kernel_s(chip)
    return None


def measured_s(r: dict) -> float:
    if r["part"] == "launch":
        return r["graph_us_per_kernel"] * 1e-6
    if r["part"] == "gemm_kernels":
        return sum(k["us"] * k["count"] for k in r["kernels"]) / r["calls"] * 1e-6
    return r["ms"] * 1e-3


def label(r: dict) -> str:
    if r["part"] == "gemm_kernels":
        return f"gemm m={r['m']} k={r['k']} n={r['n']}"
    if r["part"] == "memory":
        return f"copy {r['mb']} MiB"
    if r["part"] == "attention":
        return f"sdpa B={r['B']} L={r['L']}"
    if r["part"] == "sdpa":
        return f"causal prefill T={r['T']} KVH={r['KVH']}"
    return "launch (graph, tiny kernel)"


PART = {"gemm_kernels": "gemm", "attention": "cudnn_attention_host_timed", "sdpa": "flash_causal_prefill"}


def compare(chip: ChipSpec, paths) -> list[dict]:
    out = []
    for r in rows([*paths, GEMM_DEVICE_TIMES]):
        if r["part"] in ("gemm", "gemm_ctas"):
            continue     # host-timed: see the module docstring
        sim = simulate(chip, r)
        if sim is None:
            continue
        meas = measured_s(r)
        out.append({"part": PART.get(r["part"], r["part"]), "case": label(r), "measured_us": meas * 1e6,
                    "simulated_us": sim * 1e6, "error_pct": (sim - meas) / meas * 100})
    for r in compare_small_kernels.compare(chip, compare_small_kernels.DATA):
        part = {"decode_attention": "flash_decode_attention",
                "cudnn_decode_attention": "cudnn_decode_attention"}.get(r["op"], "small_kernel")
        out.append({**r, "part": part,
                    "case": f"{r['op']} {r['case']}"})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm")
    ap.add_argument("--data", nargs="*", default=[str(p) for p in DEFAULT_DATA])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    chip = ChipSpec.from_profile(load_profile(args.profile))
    results = compare(chip, args.data)
    parts = {}
    for r in results:
        parts.setdefault(r["part"], []).append(abs(r["error_pct"]))
    summary = {part: {"rows": len(e), "median_abs_error_pct": statistics.median(e),
                      "max_abs_error_pct": max(e)} for part, e in parts.items()}
    every = [abs(r["error_pct"]) for r in results]
    summary["all"] = {"rows": len(every), "median_abs_error_pct": statistics.median(every),
                      "max_abs_error_pct": max(every)}
    if args.json:
        print(json.dumps({"rows": results, "parts": summary}))
        return
    for r in results:
        print(f"{r['case']:42s} measured {r['measured_us']:9.2f} us  simulated {r['simulated_us']:9.2f} us  "
              f"{r['error_pct']:+6.1f}%")
    for part, s_ in summary.items():
        print(f"{part:26s} rows {s_['rows']:3d}  median |err| {s_['median_abs_error_pct']:5.1f}%  "
              f"max |err| {s_['max_abs_error_pct']:5.1f}%")


if __name__ == "__main__":
    main()
