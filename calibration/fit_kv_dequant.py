"""Calibrate the software-dequant relayout cost from the fused low-bit attention kernel.

    python calibration/fit_kv_dequant.py

shared/calibration/h200_microbench.jsonl times a Triton decode-attention kernel reading
16/8/4/2-bit packed KV on an H200 (`attention` rows with impl triton_fused and
`attention_tuned` rows). The format terms of the ALU cost (unpack, convert, FMA, convert;
hwsim/workload/kv_format.py) follow from the instructions; what moving packed codes into the
MMA operand layout costs is a property of the kernel family. This script scans that one
number for sub-byte and for byte-wide codes, prints the error table for the best pair, and
the values to put in hwsim/config/kv_cache.py (IntKv.relayout_ops_*).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from hwsim import operators as mb
from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec

DATA = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "h200_microbench.jsonl"


def rows():
    for line in DATA.read_text().splitlines():
        r = json.loads(line)
        if r.get("impl") == "triton_fused" and r["part"] in ("attention", "attention_tuned"):
            if r["B"] * r["L"] * 8 * 256 * 2 > 120e6:     # KV larger than the L2: streams from HBM
                yield r


def errors(chip, relayout_sub, relayout_byte, bits_filter):
    out = []
    for r in rows():
        if r["bits"] not in bits_filter:
            continue
        sim = mb.fused_lowbit_attention_s(chip, r["B"], r["L"], r["bits"], r["splits"],
                                          relayout_sub, relayout_byte)
        out.append((r, sim, (sim - r["ms"] * 1e-3) / (r["ms"] * 1e-3) * 100))
    return out


def main():
    chip = ChipSpec.from_profile(load_profile("h200-sxm"))
    best_byte = min((statistics.median(abs(e) for *_, e in errors(chip, 0, rb, {8})), rb)
                    for rb in [x * 0.5 for x in range(0, 33)])[1]
    best_sub = min((statistics.median(abs(e) for *_, e in errors(chip, rs, best_byte, {4, 2})), rs)
                   for rs in [x * 0.5 for x in range(0, 61)])[1]
    print(f"relayout_ops_byte = {best_byte}, relayout_ops_subbyte = {best_sub}")
    for r, sim, err in errors(chip, best_sub, best_byte, {16, 8, 4, 2}):
        print(f"{r['part']:16s} B={r['B']:3d} L={r['L']:6d} bits={r['bits']:2d} splits={r['splits']:3d} "
              f"measured {r['ms'] * 1e3:8.1f} us  simulated {sim * 1e6:8.1f} us  {err:+6.1f}%")


if __name__ == "__main__":
    main()
