"""Where the fast KV kernel's time goes, from the measured rows alone (issue 44, item 1):
bytes, time and elements of each layout beside bf16 (fast16) at the same (B, L), and the time
of one main-loop iteration (BLOCK tokens x D x K and V) on one SM.

    python validation/fast_kernels_where.py calibration/data/h100_fast_kernels.jsonl [--sms 132]

`resident` is the programs an SM holds at once, from the kernel's shared memory and registers
as compiled here for sm_90a by Triton 3.6 (the device's version; validation/fast_kernels_measured.md):
any 16-bit segment slot, empty or not, sets 128 KiB of shared memory (its pipelined bf16 K and V
tiles) -> 1 program per SM; adaptive-2's slots (8, 4, 2 bits) need 37 KiB -> 2 (188 registers);
kivi-2 runs block 32 (its K group): 32 KiB, 122 registers -> 4.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

RESIDENT = {"fast16": 1, "fast2": 1, "fast4": 1, "fast_kivi2": 4, "fast_adaptive2": 2,   # kivi2: block 32, 32 KiB, 122 registers
            "fast2_lean": 2, "fast4_lean": 2}   # hwsim/model/fast_kv_occupancy.py (portable: 188, 179 registers)


def iteration_us(r: dict, sms: int) -> float:
    """Measured time / the serial main-loop iterations an SM runs (waves x iterations each)."""
    rows, block = r["B"] * r["KVH"], r["block"]
    per_program = max(math.ceil(n / s / block) for (n, _), s in zip(
        [(v[0], v[1]) for v in r["classes"].values() if v[0]], r["splits"]) if s)
    waves = math.ceil(rows * sum(r["splits"]) / (sms * RESIDENT[r["impl"].removesuffix("_asm")]))
    return r["ms"] * 1e3 / (waves * per_program)


def table(rows: list[dict], sms: int, min_l: int = 32768) -> str:
    kv = {(r["impl"], r["B"], r["L"]): r for r in rows if r.get("part") == "kv" and "ms" in r}
    out = ["| layout | B | L | ms | time / fast16 | bytes / fast16 | GB/s | G elements/s | µs per iteration per SM slot |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (impl, b, n), r in sorted(kv.items(), key=lambda x: (x[0][1], x[0][2], x[0][0])):
        if not impl.startswith("fast") or impl.endswith("_asm") or n < min_l:
            continue
        ref = kv[("fast16", b, n)]
        elements = 2 * b * r["KVH"] * n * r["D"]
        out.append(f"| {impl} | {b} | {n // 1024}k | {r['ms']:.3f} | {r['ms'] / ref['ms']:.2f} | "
                   f"{r['bytes'] / ref['bytes']:.3f} | {r['gbps']:.0f} | {elements / r['ms'] / 1e6:.0f} | "
                   f"{iteration_us(r, sms):.2f} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured", type=Path)
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    rows = [json.loads(x) for x in args.measured.read_text().splitlines() if x.strip()]
    print(table(rows, args.sms), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
