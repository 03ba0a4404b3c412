"""Count the SASS of the fast kernels' main loops, compiled here for sm_90a without a GPU.

    python calibration/fast_sass.py            # a table: instructions per element, by pipe

Triton compiles to a cubin on a machine with no GPU (its own ptxas), and its cuobjdump
disassembles it, so the dequant cost per element that calibration/fast_predictions.py charges
can be counted from machine code rather than from the Triton source. Caveat: this machine's
Triton (see the output) is newer than the H200 machine's (3.6), so the code there may differ;
the measurement, not this count, is what hwsim gets calibrated on.

The main loop is the longest backward branch's body. Each instruction is charged in hwsim's
unit (an int32-lane op, 64 per SM per clock on Hopper): integer-pipe ops 1, fp32/fp16-pipe
ops 0.5 (128 per clock), conversions 4 (16 per clock); loads, stores, barriers, shuffles and
MMAs are listed apart (they take issue slots, not ALU lanes).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fast_kv_attn as kv  # noqa: E402
import fast_w4a16 as w4  # noqa: E402

INT = {"LOP3", "SHF", "PRMT", "IMAD", "IADD3", "LEA", "VIADD", "ISETP", "SEL", "MOV", "IABS", "IMNMX",
       "VIMNMX", "BMSK", "SGXT", "PLOP3", "P2R", "R2P", "IDP", "FLO", "POPC", "BREV", "CS2R"}
FP = {"FADD", "FMUL", "FFMA", "HADD2", "HMUL2", "HFMA2", "FMNMX", "FSEL", "FSETP", "HSETP2", "HMNMX2",
      "FSWZADD", "HSET2", "FCHK"}
CVT = {"F2F", "F2FP", "I2F", "F2I", "I2FP", "F2IP", "MUFU", "FRND", "I2I", "I2IP"}
LANE_OPS = {"int": 1.0, "fp": 0.5, "cvt": 4.0}
TARGET = GPUTarget("cuda", 90, 32)
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?\s*([^;]*);")


def compile_and_dump(fn, signature: dict, constexprs: dict, warps: int, stages: int,
                     aligned: set[str] = frozenset(), dump: str = "--dump-sass"):
    """(the kernel compiled for sm_90a, cuobjdump's `dump` of its cubin). Pointers and the integer
    arguments in `aligned` carry the divisibility by 16 that the launch-time specialization
    gives them (torch's allocations, strides that are multiples of 128), as on the device."""
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k, t in signature.items()
             if t.startswith("*") or k in aligned}
    src = ASTSource(fn=fn, signature={**signature, **{k: "constexpr" for k in constexprs}},
                    constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(src, target=TARGET, options={"num_warps": warps, "num_stages": stages})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        text = subprocess.run([os.path.join(BIN, "cuobjdump"), dump, f.name],
                              capture_output=True, text=True, check=True).stdout
    return kernel, text


def sass(fn, signature: dict, constexprs: dict, warps: int, stages: int,
         aligned: set[str] = frozenset()) -> list[tuple[int, str, str]]:
    """(address, opcode, operands) of the kernel compiled for sm_90a (compile_and_dump)."""
    _, text = compile_and_dump(fn, signature, constexprs, warps, stages, aligned)
    return [(int(a, 16), op, rest) for a, op, rest in LINE.findall(text)]


def main_loop(code) -> list[tuple[int, str, str]]:
    """The body of the longest backward branch."""
    best = (0, 0)
    for addr, op, rest in code:
        target = re.match(r"\s*(0x[0-9a-f]+)", rest)
        if op == "BRA" and target and int(target.group(1), 16) < addr:
            best = max(best, (addr - int(target.group(1), 16), int(target.group(1), 16)), key=lambda b: b[0])
    length, start = best
    return [c for c in code if start <= c[0] <= start + length]


def per_element(body, elements: float) -> dict:
    """Counts by pipe per element a thread handles in one iteration, and hwsim's lane ops."""
    ops = collections.Counter(op for _, op, _ in body)
    pipes = collections.Counter()
    for op, n in ops.items():
        pipe = "int" if op in INT else "fp" if op in FP else "cvt" if op in CVT else "other"
        pipes[pipe] += n
    out = {p: round(pipes[p] / elements, 3) for p in ("int", "fp", "cvt", "other")}
    out["lane_ops"] = round(sum(pipes[p] * LANE_OPS[p] for p in LANE_OPS) / elements, 3)
    out["instructions"] = round(sum(pipes.values()) / elements, 3)
    out["mma"] = sorted({op for op in ops if "MMA" in op})
    out["top"] = ", ".join(f"{op} {n}" for op, n in ops.most_common(8))
    return out


def kv_counts(bits: int, block: int = 64, warps: int = 4, stages: int = 2, gv: int = 128,
              asm: bool = False) -> dict:
    """The fast KV kernel with all three segment slots at `bits` (the same loop thrice)."""
    seg = {"kc": "*u8" if bits == 2 else "*i16" if bits == 4 else "*i32" if bits == 8 else "*fp16",
           "vc": None, "ks": "*fp16", "kz": "*fp16", "vs": "*fp16", "vz": "*fp16", "len": "i32", "stride": "i32",
           "splits": "i32"}
    seg["vc"] = seg["kc"]
    sig = {"q_ptr": "*fp16", "m_ptr": "*fp32", "l_ptr": "*fp32", "acc_ptr": "*fp32", "qk_scale": "fp32"}
    for slot in "abc":
        sig.update({f"{slot}{k}" if k not in ("len", "stride", "splits") else f"{slot}_{k}": t for k, t in seg.items()})
    const = dict(G=4, GP=16, D=128, BLOCK=block, A_BITS=bits, B_BITS=bits, C_BITS=bits, GK=128, GV=gv, ASM=asm)
    body = main_loop(sass(kv._lowbit_decode, sig, const, warps, stages, {"a_stride", "b_stride", "c_stride"}))
    return per_element(body, block * 128 * 2 / (32 * warps))       # K and V elements per thread


def w4_counts(bn: int = 64, bm: int = 16, warps: int = 4, stages: int = 3, asm: bool = False) -> dict:
    sig = {"x_ptr": "*fp16", "w_ptr": "*i16", "s_ptr": "*fp16", "z_ptr": "*fp16", "out_ptr": "*fp32",
           "M": "i32", "N": "i32", "K": "i32", "tiles_per_split": "i32"}
    const = dict(BN=bn, BM=bm, BK=w4.GROUP, SPLIT_K=2, ASM=asm)
    body = main_loop(sass(w4._w4a16, sig, const, warps, stages, {"N", "K"}))
    return per_element(body, bn * w4.GROUP / (32 * warps))


def main():
    print(f"Triton {triton.__version__}, sm_90a, main loop per element a thread handles")
    print(f"{'kernel':34s} {'int':>6s} {'fp':>6s} {'cvt':>6s} {'other':>6s} {'lane ops':>9s} {'instr':>6s}  mma; top")
    rows = [(f"kv {b}-bit block {blk}{' asm' * asm}", kv_counts(b, blk, asm=asm))
            for asm in (False, True) for b in (2, 4, 8, 16) for blk in (64, 128) if not (asm and b == 16)]
    rows += [(f"w4a16 BN {bn} BM {bm}{' asm' * asm}", w4_counts(bn, bm, asm=asm))
             for asm in (False, True) for bn in (64, 128) for bm in (16, 64)]
    for name, c in rows:
        print(f"{name:34s} {c['int']:6.2f} {c['fp']:6.2f} {c['cvt']:6.2f} {c['other']:6.2f} "
              f"{c['lane_ops']:9.2f} {c['instructions']:6.2f}  {','.join(c['mma'])}; {c['top']}")


if __name__ == "__main__":
    main()
