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
import statistics
from pathlib import Path

from fast_grid import (BATCHES, CONTEXTS, FLOOR_GROUPS, FLOOR_SHAPES, GEMM_MODELS, GEMM_ROWS, GQA,
                       KV_BLOCK, LAYOUTS, layout, model_shapes, plan_splits, segment_bytes,
                       segment_widths)
from hwsim import operators as mb
from hwsim.config.load import load_profile
from hwsim.config.scenario import kv_cache
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.hw.occupancy import resident_blocks
from hwsim.model import fast_kv_occupancy, moe_kernels, ops
from hwsim.model.fast_gemm import fast_lanes, fast_weight_only_gemm
from hwsim.model.kernel import Kernel
from hwsim.model.weight_format import WeightFormat
from hwsim.workload.kv_format import from_config

ADDR = mb.GEMM_WEIGHT_ADDR
# Lane ops per element of the fast kernels' main loops (the whole loop: dequant, addresses,
# softmax, MMA issue), counted in their SASS by calibration/fast_sass.py (Triton 3.9 here,
# sm_90a; calibration/data/fast_kernels_sass.txt): KV at block 128, 4 warps, per K or V
# element; W4A16 at BN 128, per weight, at 16 and 64 padded batch rows.
SASS_KV = {"portable": {2: 4.32, 4: 3.75, 8: 3.56, 16: 0.78},
           "asm": {2: 3.34, 4: 2.41, 8: 2.59, 16: 0.78}}
SASS_W4 = {"portable": (3.06, 4.04), "asm": (1.69, 2.64)}
# the SASS counts as counted, kept apart from SASS_KV (which calibration/fit_fast_kernels.py moves):
# under occupancy (issue 44) the counted lanes bound a loop whose fitted count is its latency chain
LANES_KV = {v: dict(t) for v, t in SASS_KV.items()}
LANES_W4 = dict(SASS_W4)       # likewise the W4A16 loop's lanes (SASS_W4 becomes its fitted chain)
IDEAL_OPS = 1.25    # the re-costing: LOP3 on packed pairs + HSUB2/HFMA2 (Marlin, QServe)


def kv_costs(name: str, context: int, head_dim: int) -> dict[str, float]:
    """Lane ops per cached element of one layout: hwsim today, the kernel's two SASS counts,
    the ideal; averaged over the layout's storage widths by their share of the tokens."""
    classes, _, _ = layout(name, context, head_dim)
    naive = from_config(kv_cache(PRESET[name])).dequant_ops_per_element(context)
    share = {bits: tokens / context for bits, tokens in segment_widths(classes)}
    out = {"naive": naive}
    for variant, table in SASS_KV.items():
        out[variant] = sum(s * table[bits] for bits, s in share.items())
    out["ideal"] = sum(s * (IDEAL_OPS if bits < 16 else 0.0) for bits, s in share.items())
    return out


PRESET = {"fast16": dict(bits=16), "fast2": dict(bits=2, group_size=128), "fast4": dict(bits=4, group_size=128),
          "adaptive2": dict(preset="adaptive-2"), "kivi2": dict(preset="kivi-2")}


def kv_predict(chip, name, B, L, H, KVH, D, lean: bool = False) -> dict:
    """hwsim's rows for one layout; `lean`: the kernel's empty slots compiled at the layout's
    width, not 16 bits. The fast counts run as a latency-bound chain overlapped by the programs
    an SM holds, as compiled (hwsim/model/fast_kv_occupancy.py); naive and ideal as before."""
    classes, gk, gv = layout(name, L, D)
    widths = segment_widths(classes)
    rows = B * KVH
    planned = plan_splits(widths, rows, min(KV_BLOCK, gk))
    splits = sum(planned)
    nbytes = sum(segment_bytes(bits, n, rows, D, gk, gv) for bits, n in widths)
    per_token_head = nbytes / (rows * L)
    out = {"bytes": nbytes + B * H * D * 2, "splits": splits}
    share = {bits: tokens / L for bits, tokens in widths}
    for cost, per_elem in kv_costs(name, L, D).items():
        occ = {}
        if cost in LANES_KV:
            program = fast_kv_occupancy.program([b for b, _ in widths], gk, asm=cost == "asm", lean=lean)
            lanes = sum(s * LANES_KV[cost][bits] for bits, s in share.items())
            occ = dict(program=program, lane_ops_per_token_head=2 * D * lanes)
            out[f"{cost}_resident"] = resident_blocks(chip.regs_per_sm, chip.smem_bytes_per_sm, program.threads,
                                                      program.regs, program.smem)
        ks = ops.decode_attention("attention", 0, B, H, KVH, D, D, L, per_token_head, ADDR, chip,
                                  splits=splits, block_m=ops.MMA_M,     # tl.dot pads the group to 16 rows
                                  segments=tuple((n, k) for (_, n), k in zip(widths, planned)),
                                  dequant_ops_per_token_head=2 * D * per_elem, **occ)
        out[f"{cost}_us"] = mb.device_time_s(chip, ks) * 1e6
        out[f"{cost}_ops_per_element"] = round(per_elem, 3)
    return out


def sdpa_predict(chip, library, B, L, H, KVH, D) -> dict:
    ks = ops.decode_attention("attention", 0, B, H, KVH, D, D, L, 2 * D * 2, ADDR, chip, library=library)
    return {"bytes": 2 * B * KVH * L * D * 2 + B * H * D * 2, "us": mb.device_time_s(chip, ks) * 1e6}


def w4_ops(variant: str, bm: int) -> float:
    """Lane ops per weight of the W4A16 loop at `bm` padded rows (SASS counts at 16 and 64)."""
    if variant == "ideal":
        return IDEAL_OPS + bm / 128          # + the per-output scale-and-zero FMAs, 2 per row per tile
    lo, hi = SASS_W4[variant]
    return lo + (bm - 16) * (hi - lo) / 48


def fast_w4a16_kernels(chip, m, k, n, per_weight, lanes=None) -> list[Kernel]:
    """calibration/fast_w4a16.py as hwsim kernels (hwsim/model/fast_gemm.py, the `fast` family):
    `per_weight` its chain, `lanes` its SASS lanes per weight (default the inline-PTX loop's)."""
    return fast_weight_only_gemm("w4a16", 0, m, k, n, chip, weight_addr=ADDR, data=Component.WEIGHT_READ,
                                 weight_bytes=WeightFormat("int4", 128, "fp16", "software").bytes_per_weight,
                                 ops_per_weight=per_weight, lanes_per_weight=lanes)


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
    out = {"naive_us": mb.device_time_s(chip, tiny) * 1e6}
    if impl == "int4_tinygemm":
        return {"us": out["naive_us"]}
    bm = max(16, 1 << (m - 1).bit_length())
    for variant in ("portable", "asm", "ideal"):
        per_weight = w4_ops(variant, bm)
        lanes = fast_lanes(bm, LANES_W4[variant]) if variant in LANES_W4 else per_weight
        out[f"{variant}_us"] = mb.device_time_s(chip, fast_w4a16_kernels(chip, m, k, n, per_weight, lanes)) * 1e6
        out[f"{variant}_ops_per_weight"] = round(per_weight, 3)
    return out


def predict_all(chip) -> list[dict]:
    """One row per timed row of the H200 script (its impl names): `us` is hwsim's prediction at
    that kernel's SASS count; fast rows also carry `naive_us` (today's fit) and `ideal_us`."""
    H, KVH, D = GQA["H"], GQA["KVH"], GQA["D"]
    rows = []
    for part, shapes, groups in (("kv", [(b, n) for b in BATCHES for n in CONTEXTS], [H // KVH]),
                                 ("floor", FLOOR_SHAPES, FLOOR_GROUPS)):
        for B, L in shapes:
            for G in groups:
                base = {"part": part, "B": B, "L": L, "H": KVH * G, "KVH": KVH, "D": D}
                for lib, impls in (("flash", ["sdpa_flash", "flash_attn"]), ("cudnn", ["sdpa_cudnn", "sdpa_default"])):
                    p = sdpa_predict(chip, lib, B, L, KVH * G, KVH, D)
                    rows += [{**base, "impl": i, **p} for i in impls
                             if part == "kv" or i in ("sdpa_flash", "sdpa_cudnn")]
                for name in LAYOUTS if part == "kv" else ["fast2", "fast16"]:
                    impl = name if name.startswith("fast") else f"fast_{name}"
                    p = kv_predict(chip, name, B, L, KVH * G, KVH, D)
                    for variant, suffix in (("portable", ""), ("asm", "_asm")):
                        if suffix and name == "fast16":
                            continue
                        rows.append({**base, "impl": impl + suffix, "us": p[f"{variant}_us"],
                                     "ops_per_element": p[f"{variant}_ops_per_element"], "bytes": p["bytes"],
                                     "splits": p["splits"], "naive_us": p["naive_us"], "ideal_us": p["ideal_us"]})
    for model in GEMM_MODELS:
        for label, k, n in model_shapes(model):
            for m in GEMM_ROWS:
                shape = {"part": "gemm", "model": model, "shape": label, "m": m, "k": k, "n": n}
                for impl in ("bf16", "fp8", "int4_tinygemm"):
                    rows.append({**shape, "impl": impl, **gemm_predict(chip, impl, m, k, n)})
                p = gemm_predict(chip, "fast_w4a16", m, k, n)
                for variant, suffix in (("portable", ""), ("asm", "_asm")):
                    rows.append({**shape, "impl": "fast_w4a16" + suffix, "us": p[f"{variant}_us"],
                                 "ops_per_weight": p[f"{variant}_ops_per_weight"], "naive_us": p["naive_us"],
                                 "ideal_us": p["ideal_us"]})
    return rows


LEAN = ["fast2", "fast4"]      # measure_fast_kernels.LEAN_LAYOUTS


def profile_counts(profile) -> dict[int, float]:
    """The fast KV family's fitted counts per stored width (the profile's dequant_kernels block)."""
    f = profile.dequant_kernels.kv.fast
    return {b: getattr(f, f"ops_per_element_{b}bit").value for b in (2, 4, 8, 16)}


def fitted_gemm_rows(chip, profile) -> list[dict]:
    """The fast_w4a16_asm rows of the GEMM grid, costed as hwsim runs the fast weight family: the
    profile's fitted chain counts (16 and 64 rows) over the inline-PTX loop's SASS lanes."""
    f = profile.dequant_kernels.weights.fast
    chain = (f.ops_per_weight_16_rows.value, f.ops_per_weight_64_rows.value)
    rows = []
    for model in GEMM_MODELS:
        for label, k, n in model_shapes(model):
            for m in GEMM_ROWS:
                bm = max(16, 1 << (m - 1).bit_length())
                per_weight = fast_lanes(bm, chain)
                us = mb.device_time_s(chip, fast_w4a16_kernels(chip, m, k, n, per_weight)) * 1e6
                rows.append({"part": "gemm", "model": model, "shape": label, "m": m, "k": k, "n": n,
                             "impl": "fast_w4a16_asm", "us": us, "ops_per_weight": round(per_weight, 3)})
    return rows


def lean_predictions(chip, counts: dict[int, float], names=LEAN, lean: bool = True) -> list[dict]:
    """The kv rows of `names` (default: the lean kernels, issue 44: empty slots at the layout's
    width, no 16-bit code), costed by the family's fitted counts (`counts`, both dequant variants:
    only the inline-PTX rows were fitted) over each variant's compiled program (its own registers)."""
    H, KVH, D = GQA["H"], GQA["KVH"], GQA["D"]
    saved = {v: dict(t) for v, t in SASS_KV.items()}
    rows = []
    try:
        for table in SASS_KV.values():
            table.update(counts)
        for B in BATCHES:
            for L in CONTEXTS:
                for name in names:
                    p = kv_predict(chip, name, B, L, H, KVH, D, lean=lean)
                    impl = (name if name.startswith("fast") else f"fast_{name}") + ("_lean" if lean else "")
                    for variant, suffix in (("portable", ""), ("asm", "_asm")):
                        if suffix and name == "fast16":
                            continue
                        rows.append({"part": "kv", "B": B, "L": L, "H": H, "KVH": KVH, "D": D,
                                     "impl": impl + suffix, "us": p[f"{variant}_us"],
                                     "ops_per_element": p[f"{variant}_ops_per_element"],
                                     "resident": p[f"{variant}_resident"], "bytes": p["bytes"],
                                     "splits": p["splits"], "naive_us": p["naive_us"], "ideal_us": p["ideal_us"]})
    finally:
        for v, t in saved.items():
            SASS_KV[v].clear()
            SASS_KV[v].update(t)
    return rows


def _find(rows, **key):
    return next(r for r in rows if all(r.get(k) == v for k, v in key.items()))


def markdown(rows: list[dict]) -> str:
    """The tables of validation/fast_kernels_predictions.md (its prose is written by hand)."""
    out = ["Decode attention, µs (Mixtral GQA: 32 query heads, 8 KV heads, head dim 128); each fast "
           "cell is naive / portable / asm:", "",
           "| B | L | flash bf16 | cuDNN bf16 | fast16 | fast2 | fast4 | adaptive-2 | kivi-2 "
           "| cuDNN / fast2_asm |", "|---:|---:|---:|---:|---:|---|---|---|---|---:|"]
    for B in BATCHES:
        for L in CONTEXTS:
            r = lambda impl: _find(rows, part="kv", B=B, L=L, impl=impl)  # noqa: E731
            three = lambda i: f"{r(i)['naive_us']:.0f} / {r(i)['us']:.0f} / {r(i + '_asm')['us']:.0f}"  # noqa: E731
            out.append(f"| {B} | {L // 1024}k | {r('sdpa_flash')['us']:.0f} | {r('sdpa_cudnn')['us']:.0f} "
                       f"| {r('fast16')['us']:.0f} | {three('fast2')} | {three('fast4')} | {three('fast_adaptive2')} "
                       f"| {three('fast_kivi2')} | {r('sdpa_cudnn')['us'] / r('fast2_asm')['us']:.2f}x |")
    out += ["", "MMA floor, µs (every query group padded to 16 rows by the fast kernel's tl.dot):", "",
            "| B | L | query rows per KV head | flash bf16 | cuDNN bf16 | fast16 | fast2 | fast2_asm |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for B, L in FLOOR_SHAPES:
        for G in FLOOR_GROUPS:
            r = lambda impl: _find(rows, part="floor", B=B, L=L, H=8 * G, impl=impl)["us"]  # noqa: E731
            out.append(f"| {B} | {L // 1024}k | {G} | {r('sdpa_flash'):.0f} | {r('sdpa_cudnn'):.0f} "
                       f"| {r('fast16'):.0f} | {r('fast2'):.0f} | {r('fast2_asm'):.0f} |")
    out += ["", "Weight GEMMs, µs; the fast W4A16 cell is naive (tinygemm's fit) / portable / asm:", "",
            "| model | GEMM (k x n) | rows | bf16 | FP8 | int4 tinygemm | fast W4A16 |",
            "|---|---|---:|---:|---:|---:|---|"]
    for r in [x for x in rows if x["impl"] == "fast_w4a16"]:
        key = dict(part="gemm", model=r["model"], shape=r["shape"], m=r["m"])
        us = lambda impl: _find(rows, impl=impl, **key)["us"]  # noqa: E731
        out.append(f"| {r['model']} | {r['shape']} ({r['k']} x {r['n']}) | {r['m']} | {us('bf16'):.1f} "
                   f"| {us('fp8'):.1f} | {us('int4_tinygemm'):.1f} "
                   f"| {r['naive_us']:.1f} / {r['us']:.1f} / {us('fast_w4a16_asm'):.1f} |")
    return "\n".join(out) + "\n"


def summary(rows: list[dict]) -> str:
    """Speed-ups the predictions imply: fast2 against cuDNN's bf16 row at contexts >= 32k, and
    the fast W4A16 against FP8."""
    long = [r for r in rows if r["part"] == "kv" and r["L"] >= 32768]
    cud = {(r["B"], r["L"]): r["us"] for r in long if r["impl"] == "sdpa_cudnn"}
    lines = []
    for label, impl, field in (("naive", "fast2", "naive_us"), ("portable", "fast2", "us"),
                               ("asm", "fast2_asm", "us"), ("ideal", "fast2", "ideal_us")):
        x = [cud[(r["B"], r["L"])] / r[field] for r in long if r["impl"] == impl]
        lines.append(f"fast2 vs cuDNN bf16 at >= 32k, {label}: median {statistics.median(x):.2f}x, "
                     f"range {min(x):.2f}-{max(x):.2f}x")
    gem = [r for r in rows if r["part"] == "gemm"]
    for impl in ("fast_w4a16", "fast_w4a16_asm"):
        x = [_find(gem, impl="fp8", model=r["model"], shape=r["shape"], m=r["m"])["us"] / r["us"]
             for r in gem if r["impl"] == impl]
        lines.append(f"{impl} vs FP8: median {statistics.median(x):.2f}x, range {min(x):.2f}-{max(x):.2f}x")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonl", help="write every predicted row here")
    ap.add_argument("--markdown", help="print the tables (the prose is in the file by hand)", action="store_true")
    ap.add_argument("--hardware", default="h200-sxm", help="the profile to predict for (a call may get an H100)")
    ap.add_argument("--lean-jsonl", help="write only the lean kernels' rows here, costed by the profile's "
                    "fitted fast counts (issue 44)")
    ap.add_argument("--fitted-jsonl", help="write every fast kv row (the layouts and the lean kernels) here, "
                    "costed by the profile's fitted fast counts (issue 44, session 20), and the fast W4A16 rows")
    args = ap.parse_args()
    profile = load_profile(args.hardware)
    chip = ChipSpec.from_profile(profile)
    if args.lean_jsonl or args.fitted_jsonl:
        rows = lean_predictions(chip, profile_counts(profile))
        if args.fitted_jsonl:        # + the fast W4A16 rows at the fitted chain (session 21, s21b on)
            rows = lean_predictions(chip, profile_counts(profile), list(LAYOUTS), lean=False) + rows
            rows += fitted_gemm_rows(chip, profile)
        Path(args.lean_jsonl or args.fitted_jsonl).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{len(rows)} fast rows on {args.hardware}, counts {profile_counts(profile)}")
        return
    rows = predict_all(chip)
    if args.jsonl:
        Path(args.jsonl).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} predicted rows; lane ops per element (SASS): KV {SASS_KV}, W4A16 {SASS_W4}")
    print(summary(rows))
    if args.markdown:
        print(markdown(rows))


if __name__ == "__main__":
    main()
