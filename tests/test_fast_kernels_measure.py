"""calibration/measure_fast_kernels.py end to end: --dry runs every part of the H200 script on
CPU (Triton's interpreter, tiny shapes) and writes its rows. Skipped without torch/triton."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# found, not imported: importing triton here, before tests/test_fast_kernels.py sets
# TRITON_INTERPRET, would leave its kernels compiled for a GPU this machine may not have
if not all(importlib.util.find_spec(m) for m in ("torch", "triton", "yaml")):
    pytest.skip("torch and triton are optional (pip install hwsim[kernels])", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_writes_every_planned_row(tmp_path):
    out = tmp_path / "fast.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "calibration" / "measure_fast_kernels.py"),
                           "--dry", "--out", str(out)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    meta, end = rows[0], rows[-1]
    assert meta["part"] == "meta" and meta["dry"] is True
    assert end["part"] == "end" and end["rows_done"] == meta["planned_rows"] and end["rows_skipped"] == 0
    assert not [r for r in rows if "error" in r]
    checks = {r["impl"]: r for r in rows if r["part"] == "check"}
    assert set(checks) == {"fast16", "fast2", "fast4", "fast_adaptive2", "fast_kivi2", "fast_w4a16",
                           "fast2_lean", "fast4_lean"}
    assert all(r["rel_err"] < 1e-2 and not r["nan"] for r in checks.values())
    timed = [r for r in rows if r["part"] in ("kv", "floor", "gemm", "kv_tune", "gemm_tune")]
    assert len(timed) == meta["planned_rows"]
    assert all(r["ms"] > 0 and r["bytes"] > 0 for r in timed)
    kv = {r["impl"]: r for r in rows if r["part"] == "kv"}
    # the packed layouts read fewer bytes than bf16 (at the dry run's 96 tokens, kivi-2's recent
    # window covers everything, so it reads as 16-bit)
    assert kv["fast2"]["bytes"] < kv["fast4"]["bytes"] < kv["fast16"]["bytes"] == kv["sdpa_flash"]["bytes"]
    assert {r["impl"] for r in rows if r["part"] == "gemm"} == {"bf16", "fp8", "int4_tinygemm", "fast_w4a16"}


def test_every_planned_h200_row_has_its_prediction_written_down():
    """calibration/data/h200_fast_kernels_predicted.jsonl (validation/fast_kernels_predictions.md)
    holds a prediction for every kv, gemm and floor row the H200 run will time, under the same
    key, so each measured row has one to be compared with."""
    sys.path.insert(0, str(ROOT / "calibration"))
    import measure_fast_kernels as m
    cfg = dict(GQA=m.GQA, BATCHES=m.BATCHES, CONTEXTS=m.CONTEXTS, FLOOR_SHAPES=m.FLOOR_SHAPES,
               FLOOR_GROUPS=m.FLOOR_GROUPS, GEMM_ROWS=m.GEMM_ROWS, KV_TUNE_SHAPES=m.KV_TUNE_SHAPES,
               KV_TUNE=m.KV_TUNE, GEMM_TUNE=m.GEMM_TUNE, REPLAYS=m.REPLAYS, WARM=m.WARM)
    planned = m.plan(cfg, {"kv", "gemm", "floor", "tune"}, "cuda", ("", "_asm"))
    # the lean kernels (issue 44) were predicted later, in a file of their own
    predicted = [json.loads(line) for name in ("h200_fast_kernels_predicted.jsonl", "h200_fast_kernels_lean_predicted.jsonl")
                 for line in (ROOT / "calibration" / "data" / name).read_text().splitlines()]
    index = {(r["part"], r["impl"], *sorted((k, r[k]) for k in ("B", "L", "H", "model", "shape", "m") if k in r))
             for r in predicted}
    compared = [(part, impl, *sorted(key.items())) for part, impl, key, _ in planned if part != "tune"]
    assert len(compared) >= 596            # 256 kv (+16 where flash-attn is installed), 300 gemm, 40 floor
    missing = [k for k in compared if k not in index]
    assert not missing, missing[:5]


def test_impls_filter_runs_only_the_named_kernels(tmp_path):
    """--impls picks the lean kernel alone (the device command of issue 44): its check and rows."""
    out = tmp_path / "lean.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "calibration" / "measure_fast_kernels.py"), "--dry",
                           "--out", str(out), "--parts", "check,kv", "--impls", "fast2_lean"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(r["part"], r["impl"]) for r in rows if "impl" in r} == {("check", "fast2_lean"), ("kv", "fast2_lean")}
    assert next(r for r in rows if r["part"] == "check")["rel_err"] < 1e-2
