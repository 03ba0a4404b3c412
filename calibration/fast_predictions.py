"""What hwsim predicts for every timed row of calibration/measure_fast_kernels.py, written down
before the H200 measures it (issue 31, item 4).

    python calibration/fast_predictions.py --jsonl calibration/data/h200_fast_kernels_predicted.jsonl \
        --markdown validation/fast_kernels_predictions.md

Each fast-kernel row is costed three ways, through hwsim's own kernels and engine (no per-row
factor), differing only in the integer-lane ops charged per dequantized element:
- `naive`: hwsim today (the software path fitted to shared/calibration/qkv_attn.py for KV,
  kv_format.py's 26 ops per sub-byte element; tinygemm's fit for weights);
- `fast`: the instruction count of this kernel's dequant path, counted from its Triton source
  (no GPU here, so no PTX/SASS to count from; the table below says what each term assumes);
- `ideal`: the issue's re-costing at 1.25 ops per element (Marlin/QServe's LOP3 on packed
  pairs + HSUB2/HFMA2), for weights also on wgmma rather than mma.sync.
Times are the kernels' device time (mb.device_time_s, as compare_moe_kernels.py), combine or
split-K reduction included; a replayed graph adds about a microsecond of launch gap per kernel.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from fast_grid import (BATCHES, CONTEXTS, FLOOR_GROUPS, FLOOR_SHAPES, GEMM_MODELS, GEMM_ROWS, GQA,
                       KV_BLOCK, LAYOUTS, layout, model_shapes, plan_splits, segment_bytes,
                       segment_widths)
from hwsim import operators as mb
from hwsim.config.load import load_profile
from hwsim.config.scenario import KvCache
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model import moe_kernels, ops
from hwsim.model.kernel import Kernel
from hwsim.model.weight_format import WeightFormat
from hwsim.workload.kv_format import F2H_OPS, FMA_OPS, from_config

ADDR = mb.GEMM_WEIGHT_ADDR
# -- the fast KV kernel's ops per cached element, from calibration/fast_kv_attn.py's source, in
# hwsim's unit (an int32-lane op; an fp32 or scalar fp16 FMA-pipe op is FMA_OPS = 0.5):
SHF = 0.75          # slices 1-3 shift their container; slice 0 does not
LOP3 = 1.0          # (x & mask) | 0x6400, assuming LLVM fuses the two into one LOP3 (else 2)
HADD = FMA_OPS      # - 1024.0 in fp16, one scalar HADD (0.25 if ptxas pairs it into HADD2)
RELAYOUT = 0.25     # the dot operand's trip through shared memory: 16-byte st.shared + ldmatrix per 8
WIDEN = {2: 0.25, 4: 0.0, 8: 1.0}   # uint8 container -> int16 once per 4 codes; int32 -> int16
ELEMENT_OPS = {b: SHF + LOP3 + HADD + RELAYOUT + WIDEN[b] for b in (2, 4, 8)}
GP = 16             # query rows of the dot (the GQA group padded to mma.sync's 16)
# per token block of K (BLOCK tokens, per-channel group): q * scale (FMUL), its fp32 -> fp16
# cast (F2H_OPS), the A operand's relayout, q . zero (FMA) and its row reduction (~1)
K_BLOCK_OPS = FMA_OPS + F2H_OPS + RELAYOUT + FMA_OPS + 1.0
# per token of V (one group per token): p * scale, p * zero, and that row sum, over D columns
V_TOKEN_OPS = FMA_OPS + FMA_OPS + 1.0
IDEAL_OPS = 1.25
# -- the fast W4A16 per weight: the same element path (int16 containers), plus per output and
# K tile (128 weights) acc += part * scale + zero * sum(x): two FMAs per padded batch row
W4_ELEMENT_OPS = SHF + LOP3 + HADD + RELAYOUT
W4_BN = 64


def kv_fast_ops(bits: int, block: int = KV_BLOCK, head_dim: int = GQA["D"]) -> float:
    """Ops per cached element (K and V averaged) of the fast kernel for codes of `bits`."""
    if bits >= 16:
        return 0.0
    k_side = ELEMENT_OPS[bits] + GP / block * K_BLOCK_OPS
    v_side = ELEMENT_OPS[bits] + GP / head_dim * V_TOKEN_OPS
    return (k_side + v_side) / 2


PRESET = {"fast16": dict(bits=16), "fast2": dict(bits=2, group_size=128), "fast4": dict(bits=4, group_size=128),
          "adaptive2": dict(preset="adaptive-2"), "kivi2": dict(preset="kivi-2")}


def kv_costs(name: str, context: int, head_dim: int) -> dict[str, float]:
    """Ops per cached element of one layout: hwsim today, this kernel's count, the ideal."""
    classes, _, _ = layout(name, context, head_dim)
    naive = from_config(KvCache(**PRESET[name])).dequant_ops_per_element(context)
    share = {bits: tokens / context for bits, tokens in segment_widths(classes)}
    fast = sum(s * kv_fast_ops(bits) for bits, s in share.items())
    ideal = sum(s * (IDEAL_OPS if bits < 16 else 0.0) for bits, s in share.items())
    return {"naive": naive, "fast": fast, "ideal": ideal}


def kv_predict(chip, name, B, L, H, KVH, D) -> dict:
    classes, gk, gv = layout(name, L, D)
    widths = segment_widths(classes)
    rows = B * KVH
    splits = sum(plan_splits(widths, rows, min(KV_BLOCK, gk)))
    nbytes = sum(segment_bytes(bits, n, rows, D, gk, gv) for bits, n in widths)
    per_token_head = nbytes / (rows * L)
    out = {"bytes": nbytes + B * H * D * 2, "splits": splits}
    for cost, per_elem in kv_costs(name, L, D).items():
        ks = ops.decode_attention("attention", 0, B, H, KVH, D, D, L, per_token_head, ADDR, chip,
                                  splits=splits, block_m=ops.MMA_M,
                                  dequant_ops_per_token_head=2 * D * per_elem)
        out[f"{cost}_us"] = mb.device_time_s(chip, ks) * 1e6
        out[f"{cost}_ops_per_element"] = round(per_elem, 3)
    return out


def sdpa_predict(chip, library, B, L, H, KVH, D) -> dict:
    ks = ops.decode_attention("attention", 0, B, H, KVH, D, D, L, 2 * D * 2, ADDR, chip, library=library)
    return {"bytes": 2 * B * KVH * L * D * 2 + B * H * D * 2, "us": mb.device_time_s(chip, ks) * 1e6}


def fast_w4a16_kernels(chip, m, k, n, per_weight, mma_sync) -> list[Kernel]:
    """calibration/fast_w4a16.py as hwsim kernels: (n / 64) x split-K programs, then the sum."""
    fmt = WeightFormat("int4", 128, "fp16", "software")
    k_tiles = k // 128
    split = max(1, min(k_tiles, math.ceil(2 * chip.sms / (n // W4_BN))))
    split = math.ceil(k_tiles / math.ceil(k_tiles / split))
    chunk = k / split
    bm = max(16, 1 << (m - 1).bit_length())
    main = Kernel(name="w4a16", layer=0, tiles=(n // W4_BN) * split,
                  hbm_read=W4_BN * chunk * fmt.bytes_per_weight, l2_read=m * chunk * ops.ACT_BYTES,
                  l2_write=m * W4_BN * (4 if split > 1 else 2), tensor_flops=2.0 * W4_BN * bm * chunk,
                  int_ops=(per_weight + bm / 128) * W4_BN * chunk, address=ADDR,
                  data=Component.WEIGHT_READ, compute=Component.DEQUANT, mma_sync=mma_sync)
    if split == 1:
        return [main]
    return [main, ops.elementwise("w4a16.sum", 0, split * m * n * 4, m * n * 2, 0.25, chip)]


def gemm_predict(chip, impl, m, k, n) -> dict:
    if impl == "bf16":
        return {"us": mb.device_time_s(chip, mb.gemm_kernels(chip, m, k, n)) * 1e6}
    if impl == "fp8":
        f = WeightFormat("fp8", 0, "fp32", "native")
        ks = [ops.elementwise("cast", 0, m * k * 2, m * k, 1.0, chip)]
        ks += ops.gemm("g", 0, m, k, n, chip, weight_addr=ADDR, weight_bytes=f.bytes_per_weight,
                       data=Component.WEIGHT_READ, dtype="fp8")
        return {"us": mb.device_time_s(chip, ks) * 1e6}
    tiny = [moe_kernels.weight_only_gemm("q", 0, m, k, n, chip, weight_addr=ADDR,
                                         weight_bytes=WeightFormat("int4", 128, "bf16", "software").bytes_per_weight,
                                         data=Component.WEIGHT_READ)]
    naive_us = mb.device_time_s(chip, tiny) * 1e6
    if impl == "int4_tinygemm":
        return {"us": naive_us}
    return {"naive_us": naive_us,
            "fast_us": mb.device_time_s(chip, fast_w4a16_kernels(chip, m, k, n, W4_ELEMENT_OPS, True)) * 1e6,
            "ideal_us": mb.device_time_s(chip, fast_w4a16_kernels(chip, m, k, n, IDEAL_OPS, False)) * 1e6}


def predict_all(chip) -> list[dict]:
    H, KVH, D = GQA["H"], GQA["KVH"], GQA["D"]
    rows = []
    for part, shapes, groups in (("kv", [(b, n) for b in BATCHES for n in CONTEXTS], [H // KVH]),
                                 ("floor", FLOOR_SHAPES, FLOOR_GROUPS)):
        for B, L in shapes:
            for G in groups:
                base = {"part": part, "B": B, "L": L, "H": KVH * G, "KVH": KVH, "D": D}
                for lib, impls in (("flash", ["sdpa_flash", "flash_attn"]), ("cudnn", ["sdpa_cudnn", "sdpa_default"])):
                    p = sdpa_predict(chip, lib, B, L, KVH * G, KVH, D)
                    rows += [{**base, "impl": i, **p} for i in impls if part == "kv" or i in ("sdpa_flash", "sdpa_cudnn")]
                for name in LAYOUTS if part == "kv" else ["fast2", "fast16"]:
                    impl = name if name.startswith("fast") else f"fast_{name}"
                    rows.append({**base, "impl": impl, **kv_predict(chip, name, B, L, KVH * G, KVH, D)})
    for model in GEMM_MODELS:
        for label, k, n in model_shapes(model):
            for m in GEMM_ROWS:
                for impl in ("bf16", "fp8", "int4_tinygemm", "fast_w4a16"):
                    rows.append({"part": "gemm", "impl": impl, "model": model, "shape": label,
                                 "m": m, "k": k, "n": n, **gemm_predict(chip, impl, m, k, n)})
    return rows


def markdown(rows: list[dict]) -> str:
    """The tables of validation/fast_kernels_predictions.md (its prose is written by hand)."""
    out = []
    kvr = [r for r in rows if r["part"] == "kv"]
    out.append("| B | L | flash bf16 | cuDNN bf16 | fast16 | fast2 naive / fast / ideal | fast4 naive / fast / ideal "
               "| adaptive-2 naive / fast / ideal | kivi-2 naive / fast / ideal | fast2 vs cuDNN (fast) |")
    out.append("|---:|---:|---:|---:|---:|---|---|---|---|---:|")
    for B in BATCHES:
        for L in CONTEXTS:
            r = {x["impl"]: x for x in kvr if x["B"] == B and x["L"] == L}
            three = lambda i: " / ".join(f"{r[i][c + '_us']:.0f}" for c in ("naive", "fast", "ideal"))  # noqa: E731
            out.append(f"| {B} | {L // 1024}k | {r['sdpa_flash']['us']:.0f} | {r['sdpa_cudnn']['us']:.0f} "
                       f"| {r['fast16']['fast_us']:.0f} | {three('fast2')} | {three('fast4')} "
                       f"| {three('fast_adaptive2')} | {three('fast_kivi2')} "
                       f"| {r['sdpa_cudnn']['us'] / r['fast2']['fast_us']:.2f}x |")
    out.append("")
    out.append("MMA floor (µs; the fast kernel pads every query group to 16 rows):")
    out.append("")
    out.append("| B | L | query rows per KV head | flash bf16 | cuDNN bf16 | fast16 | fast2 (fast) |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|")
    for r in [x for x in rows if x["part"] == "floor" and x["impl"] == "fast2"]:
        same = {x["impl"]: x for x in rows if x["part"] == "floor" and x["B"] == r["B"] and x["H"] == r["H"]}
        out.append(f"| {r['B']} | {r['L'] // 1024}k | {r['H'] // r['KVH']} | {same['sdpa_flash']['us']:.0f} "
                   f"| {same['sdpa_cudnn']['us']:.0f} | {same['fast16']['fast_us']:.0f} | {r['fast_us']:.0f} |")
    out.append("")
    out.append("| model | GEMM (k x n) | rows | bf16 | FP8 | int4 tinygemm | fast W4A16 naive / fast / ideal |")
    out.append("|---|---|---:|---:|---:|---:|---|")
    gem = [r for r in rows if r["part"] == "gemm"]
    for r in [x for x in gem if x["impl"] == "fast_w4a16"]:
        same = {x["impl"]: x for x in gem if (x["model"], x["shape"], x["m"]) == (r["model"], r["shape"], r["m"])}
        out.append(f"| {r['model']} | {r['shape']} ({r['k']} x {r['n']}) | {r['m']} | {same['bf16']['us']:.1f} "
                   f"| {same['fp8']['us']:.1f} | {same['int4_tinygemm']['us']:.1f} "
                   f"| {r['naive_us']:.1f} / {r['fast_us']:.1f} / {r['ideal_us']:.1f} |")
    return "\n".join(out) + "\n"


def summary(rows: list[dict]) -> str:
    """Speed-ups the predictions imply (fast2 against the cuDNN bf16 row, contexts >= 32k)."""
    long = [r for r in rows if r["part"] == "kv" and r["L"] >= 32768]
    cud = {(r["B"], r["L"]): r["us"] for r in long if r["impl"] == "sdpa_cudnn"}
    lines = []
    for cost in ("naive", "fast", "ideal"):
        x = [cud[(r["B"], r["L"])] / r[f"{cost}_us"] for r in long if r["impl"] == "fast2"]
        lines.append(f"fast2 vs cuDNN bf16 at >= 32k, {cost}: median {statistics.median(x):.2f}x, "
                     f"range {min(x):.2f}-{max(x):.2f}x")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonl", help="write every predicted row here")
    ap.add_argument("--markdown", help="print the tables (the prose is in the file by hand)", action="store_true")
    args = ap.parse_args()
    chip = ChipSpec.from_profile(load_profile("h200-sxm"))
    rows = predict_all(chip)
    if args.jsonl:
        Path(args.jsonl).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} predicted rows; ops per element: KV fast {ELEMENT_OPS} + per-block terms, "
          f"W4A16 fast {W4_ELEMENT_OPS}")
    print(summary(rows))
    if args.markdown:
        print(markdown(rows))


if __name__ == "__main__":
    main()
