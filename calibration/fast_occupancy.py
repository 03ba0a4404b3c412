"""Shared memory and registers of the fast KV kernel (calibration/fast_kv_attn.py), compiled here
for sm_90a without a GPU, for every set of three segment-slot widths and token block: the
table hwsim's occupancy of the fast family reads (hwsim/model/fast_kv_occupancy.py, issue 44).

    python calibration/fast_occupancy.py            # prints the table as a Python literal
    python calibration/fast_occupancy.py --w4a16    # the W4A16 GEMM's (hwsim/model/fast_gemm.py)
    python calibration/fast_occupancy.py --measured calibration/data/h100_fast_kernels_lean.jsonl
                                                    # the device's own compile: MEASURED's literal

Triton compiles to a cubin on a machine with no GPU (its own ptxas): `metadata.shared` is the
shared memory a program allocates, and cuobjdump's resource usage gives its registers per
thread. The kernel is compiled once for all three slots, so every slot's code is in it, an
empty one too (FastKVAttention pads missing slots with 16 bits; `lean=True`, with the first
segment's width). 4 warps, 2 stages (fast_grid.KV_WARPS, measure_fast_kernels' default), the
GQA group of 4 padded to 16 rows, head dim 128; the K group is the block (KIVI's 32: block 32).
This machine runs Triton 3.6, the version the H100 call ran (calibration/data/h100_fast_kernels.jsonl's meta).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys

os.environ.pop("TRITON_INTERPRET", None)
import triton  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fast_kv_attn as kv  # noqa: E402
from fast_sass import compile_and_dump  # noqa: E402
from fast_programs import measured_table  # noqa: E402

CONTAINER = {2: "*u8", 4: "*i16", 8: "*i32", 16: "*fp16"}
WIDTHS = (2, 4, 8, 16)
BLOCKS = (128, 64, 32)


def compiled(bits3: tuple[int, int, int], block: int = 128, warps: int = 4, stages: int = 2,
             asm: bool = False) -> dict:
    """{smem, regs, spill} of _lowbit_decode with slots A, B, C at bits3, group = block."""
    sig = {"q_ptr": "*fp16", "m_ptr": "*fp32", "l_ptr": "*fp32", "acc_ptr": "*fp32", "qk_scale": "fp32"}
    for slot, bits in zip("abc", bits3):
        sig.update({f"{slot}kc": CONTAINER[bits], f"{slot}vc": CONTAINER[bits]})
        sig.update({f"{slot}{k}": "*fp16" for k in ("ks", "kz", "vs", "vz")})
        sig.update({f"{slot}_{k}": "i32" for k in ("len", "stride", "splits")})
    const = dict(G=4, GP=16, D=128, BLOCK=block, A_BITS=bits3[0], B_BITS=bits3[1], C_BITS=bits3[2],
                 GK=block, GV=min(block, 128), ASM=asm)
    kernel, usage = compile_and_dump(kv._lowbit_decode, sig, const, warps, stages,
                                     {"a_stride", "b_stride", "c_stride"}, "--dump-resource-usage")
    return {"smem": kernel.metadata.shared, "regs": int(re.search(r"REG:(\d+)", usage).group(1)),
            "stack": int(re.search(r"STACK:(\d+)", usage).group(1))}


def compiled_w4a16(bm: int, bn: int = 128, warps: int = 4, stages: int = 3) -> tuple[int, int]:
    """(shared memory bytes, registers per thread) of calibration/fast_w4a16.py's _w4a16, inline
    PTX, at `bm` padded rows: hwsim/model/fast_gemm.py FAST_PROGRAM."""
    import fast_w4a16 as w4
    sig = {"x_ptr": "*fp16", "w_ptr": "*i16", "s_ptr": "*fp16", "z_ptr": "*fp16", "out_ptr": "*fp32",
           "M": "i32", "N": "i32", "K": "i32", "tiles_per_split": "i32"}
    const = dict(BN=bn, BM=bm, BK=w4.GROUP, SPLIT_K=2, ASM=True)
    kernel, usage = compile_and_dump(w4._w4a16, sig, const, warps, stages, {"N", "K"}, "--dump-resource-usage")
    return kernel.metadata.shared, int(re.search(r"REG:(\d+)", usage).group(1))


def print_measured(path: str):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    meta = next((r for r in rows if r.get("part") == "meta"), {})
    print(f"# {path}: {meta.get('device')}, Triton {meta.get('triton')}: (slot widths ascending, block, asm)"
          " -> (shared memory bytes, registers per thread, threads)")
    print("MEASURED = {")
    for k, v in sorted(measured_table(rows).items()):
        print(f"    {k}: {v},")
    print("}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", help="a measure_fast_kernels.py JSONL: print the programs its timed rows ran")
    ap.add_argument("--w4a16", action="store_true", help="the W4A16 GEMM's programs at 16, 32 and 64 rows")
    args = ap.parse_args()
    if args.w4a16:
        print(f"# Triton {triton.__version__}, sm_90a, BN 128, 4 warps, 3 stages, inline PTX: rows -> (smem, regs)")
        print("FAST_PROGRAM =", {bm: compiled_w4a16(bm) for bm in (16, 32, 64)})
        return
    if args.measured:
        print_measured(args.measured)
        return
    print(f"# Triton {triton.__version__}, sm_90a, 4 warps, 2 stages: (slot widths ascending, block, asm)"
          " -> (shared memory bytes, registers per thread)")
    print("COMPILED = {")
    for block in BLOCKS:
        for asm in (False, True):
            for bits3 in itertools.combinations_with_replacement(WIDTHS, 3):
                if asm and block == 64:
                    continue
                c = compiled(bits3, block, asm=asm)
                print(f"    ({bits3}, {block}, {asm}): ({c['smem']}, {c['regs']}),"
                      + (f"  # stack {c['stack']} B" if c["stack"] else ""), flush=True)
    print("}")


if __name__ == "__main__":
    main()
