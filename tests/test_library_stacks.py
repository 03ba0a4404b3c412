"""Issue 44 item 2: the library-stack scripts (calibration/measure_gemlite.py,
calibration/measure_quantized_cache.py) plan what the H200 run times, and every planned row has
hwsim's prediction written down before it (calibration/data/h200_library_stacks_predicted.jsonl)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "calibration"))
import library_grid as grid  # noqa: E402

PREDICTED = ROOT / "calibration" / "data" / "h200_library_stacks_predicted.jsonl"


def predicted_keys():
    rows = [json.loads(line) for line in PREDICTED.read_text().splitlines()]
    return {(r["part"], r.get("impl"), r["model"], r.get("shape"), r.get("m"), r.get("cache"), r.get("batch"),
             r.get("context_tokens")) for r in rows}


def test_every_planned_gemlite_row_has_its_prediction():
    keys = predicted_keys()
    planned = grid.gemm_plan(grid.MODELS, grid.ROWS, grid.BITS, "cuda")
    assert len(planned) == 2 * 4 * 7 * 4              # 2 models x 4 shapes x 7 m x (3 widths + bf16)
    for model, label, m, _, _, bits in planned:
        impl = f"gemlite_a16w{bits}" if bits else "bf16"
        assert ("gemm", impl, model, label, m, None, None, None) in keys


def test_every_planned_cache_step_has_its_prediction():
    keys = predicted_keys()
    planned = grid.step_plan(["llama-3.1-8b"], list(grid.CACHES), grid.POINTS)
    assert len(planned) == 18
    for model, batch, context, cache in planned:
        assert ("step", None, model, None, None, cache, batch, context) in keys


def test_the_flush_falls_after_the_timed_and_profiled_steps():
    # the residual starts at RESIDUAL_FILL and flushes on the step that finds RESIDUAL - 1 in it
    assert grid.RESIDUAL_FILL + grid.FLUSH_AT - 1 == grid.RESIDUAL - 1
    assert grid.FLUSH_AT == grid.WARM + grid.TIMED + grid.PROFILED + 1


def test_nearest_config_exact_then_nearest_with_block_k_clamped():
    cache = {"GEMV_REVSPLITK": {str((1, 4096, 4096, 64, 8, 104)): {"BLOCK_SIZE_K": 8, "BLOCK_SIZE_N": 128}},
             "GEMM_SPLITK": {str((16, 4096, 4096, 64, 8, 104)): {"BLOCK_SIZE_K": 128, "BLOCK_SIZE_N": 64},
                             str((16, 8192, 4096, 64, 8, 104)): {"BLOCK_SIZE_K": 32, "BLOCK_SIZE_N": 32}}}
    cfg, source = grid.nearest_config(cache, "GEMV_REVSPLITK", 1, 4096, 4096, 64, 4)
    assert source.startswith("h100.json exact") and cfg["BLOCK_SIZE_K"] == 8
    cfg, source = grid.nearest_config(cache, "GEMV_REVSPLITK", 2, 4096, 4096, 64, 2)
    assert "nearest" in source and cfg["BLOCK_SIZE_K"] == 16       # 2-bit: 16 codes an int32
    cfg, _ = grid.nearest_config(cache, "GEMM_SPLITK", 16, 4096, 4096, 64, 2)
    assert cfg["BLOCK_SIZE_K"] == 64 and cfg["BLOCK_SIZE_N"] == 64  # clamped to the group
    cfg, _ = grid.nearest_config(cache, "GEMM_SPLITK", 16, 7000, 4096, 64, 4)
    assert cfg["BLOCK_SIZE_N"] == 32                                # nearer n
    assert grid.nearest_config(cache, "GEMM", 64, 4096, 4096, 64, 4) == (None, "none: gemlite's default config")
    assert [grid.matmul_type(m, 4) for m in (1, 4, 5, 63, 64)] == ["GEMV_REVSPLITK"] * 2 + ["GEMM_SPLITK"] * 2 + ["GEMM"]
    assert grid.matmul_type(2, 8) == "GEMV_SPLITK" and grid.matmul_type(3, 8) == "GEMM_SPLITK"


def test_gemlite_dry_run_writes_its_plan(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "g.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "calibration" / "measure_gemlite.py"), "--dry",
                           "--out", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["part"] == "meta" and rows[0]["planned_rows"] == len(rows) - 1
    impls = {r["impl"] for r in rows[1:]}
    assert impls == {"bf16", "gemlite_a16w2", "gemlite_a16w4", "gemlite_a16w8"}
    for r in rows[1:]:
        assert r["scales"] == [r["n"], r["k"] // grid.GROUP]


def test_a_quantized_cache_point_on_the_cpu(tmp_path):
    """One hqq2 point of a tiny Llama on the CPU: the flush falls on its step (the residual is
    empty after it). hqq travels to the device as a wheel: skipped where it is not installed."""
    pytest.importorskip("transformers")
    pytest.importorskip("hqq")
    import measure_quantized_cache as q
    model, cfg = q.build("llama-3.1-8b", "eager", "cpu", dry=True)
    row = q.measure_point(model, cfg, "llama-3.1-8b", "hqq2", 1, 256, "cpu", False, str(tmp_path))
    assert row["residual_after_flush"] == 0 and row["flush_step_ms"] > 0
    assert row["kv_tokens_after"] == 256 + grid.WARM + grid.TIMED + grid.PROFILED    # a token a step
    assert len(row["step_ms_all"]) == grid.TIMED and (tmp_path / row["trace"]).exists()
