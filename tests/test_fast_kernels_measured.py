"""Issue 44: the claims validation/fast_kernels_measured.md makes from the H100's fast-kernel rows
(calibration/data/h100_fast_kernels.jsonl) hold on those rows."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))
import fast_kernels_where  # noqa: E402

ROWS = [json.loads(x) for x in (ROOT / "calibration" / "data" / "h100_fast_kernels.jsonl").read_text().splitlines()
        if x.strip()]
KV = {(r["impl"], r["B"], r["L"]): r for r in ROWS if r.get("part") == "kv" and "ms" in r}
LONG = sorted({(b, n) for _, b, n in KV if n >= 32768})


def test_the_loop_not_the_bytes_sets_the_time():
    """2- and 4-bit read a seventh and a quarter of bf16's bytes in the same time (within 8%)."""
    for b, n in LONG:
        ref = KV[("fast16", b, n)]
        for impl, share in (("fast2", 0.15), ("fast4", 0.27)):
            r = KV[(impl, b, n)]
            assert r["bytes"] < share * ref["bytes"] and abs(r["ms"] / ref["ms"] - 1) < 0.08, (impl, b, n)


def test_adaptive2_is_faster_than_fast2_on_the_same_work_plan():
    for b, n in LONG:
        a, f = KV[("fast_adaptive2", b, n)], KV[("fast2", b, n)]
        assert (a["block"], a["gk"], a["gv"]) == (f["block"], f["gk"], f["gv"])
        assert abs(sum(a["splits"]) - sum(f["splits"])) <= 2               # programs: within 2 a row
        assert a["ms"] < 0.75 * f["ms"], (b, n)


def test_the_where_table_has_a_row_per_long_context_point_and_layout():
    lines = fast_kernels_where.table(ROWS, 132).splitlines()
    assert len(lines) == 2 + 5 * len(LONG)
    assert all(float(line.split("|")[-2]) > 0 for line in lines[2:])


def test_occupancy_carries_adaptive2_and_kivi2():
    """Section 3b: with the compiled kernels' programs per SM, the fitted counts (the h100-sxm
    profile's) predict adaptive-2's and kivi-2's inline-PTX rows within 10% and 20% median
    (adaptive-2 was 69% too slow with one program per SM for all)."""
    import statistics
    sys.path.insert(0, str(ROOT / "calibration"))
    import fast_predictions as fp
    from fast_grid import GQA
    from hwsim.config.load import load_profile
    from hwsim.hw.chip import ChipSpec
    profile = load_profile("h100-sxm")
    chip = ChipSpec.from_profile(profile)
    saved = dict(fp.SASS_KV["asm"])
    try:
        fp.SASS_KV["asm"].update(fp.profile_counts(profile))
        for impl, name, bound in (("fast_adaptive2_asm", "adaptive2", 0.10), ("fast_kivi2_asm", "kivi2", 0.20)):
            errs = [fp.kv_predict(chip, name, b, n, GQA["H"], GQA["KVH"], GQA["D"])["asm_us"] / (r["ms"] * 1e3) - 1
                    for (i, b, n), r in KV.items() if i == impl]
            assert len(errs) == 16 and statistics.median(map(abs, errs)) < bound, (impl, errs)
    finally:
        fp.SASS_KV["asm"].clear()
        fp.SASS_KV["asm"].update(saved)


def test_every_gemlite_row_has_hwsims_prediction_beside_it():
    """validation/compare_library_stacks.py (issue 44, post hoc): one table row with an error per
    measured gemlite and bf16 row; bf16 (cuBLAS, calibrated) within 8% median there, and the m = 64
    `GEMM` rows hwsim has no kernel for shown too fast, not hidden."""
    sys.path[:0] = [str(ROOT / "calibration")]
    import compare_library_stacks as cls
    table, by = cls.gemlite_predicted_table()
    measured = [r for r in cls.jsonl(cls.GEMLITE) if r.get("part") == "gemm" and "ms" in r]
    assert len([x for x in table.splitlines() if x.endswith("% |")]) == len(measured) == 194
    assert sum(len(by[i]) for i in ("bf16", "gemlite_a16w2", "gemlite_a16w4", "gemlite_a16w8")) == len(measured)
    med = sorted(map(abs, by["bf16"]))[len(by["bf16"]) // 2]
    assert med < 0.08
    assert max(by["gemlite_a16w4 GEMM"]) < -0.3


def test_the_w4a16_fit_file_is_the_profiles_chain():
    """calibration/data/fit_fast_kernels_h100_w4a16_s21.txt's counts are h100-sxm's, and its errors
    (the 60 H100 rows under them) are what section 3f of fast_kernels_measured.md says."""
    from hwsim.config.load import load_profile
    line = (ROOT / "calibration" / "data" / "fit_fast_kernels_h100_w4a16_s21.txt").read_text().splitlines()[1]
    fit = json.loads(line.split(" ", 2)[2])
    f = load_profile("h100-sxm").dequant_kernels.weights.fast
    assert fit["ops_per_weight_16_64"] == [f.ops_per_weight_16_rows.value, f.ops_per_weight_64_rows.value]
    doc = (ROOT / "validation" / "fast_kernels_measured.md").read_text()
    assert f"{fit['median_after']:.1%} / {fit['max_after']:.0%}" in doc
