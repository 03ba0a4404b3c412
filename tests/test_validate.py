"""`hwsim validate`: the dataset contract, per-row failures, and accuracy on real H200 steps."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hwsim.validate import load_dataset, validate_rows

DATA = Path(__file__).resolve().parents[1] / "validation" / "data" / "h200_steps.csv"
HEADER = "name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,notes\n"


def test_json_shape_and_failed_rows(tmp_path):
    ds = tmp_path / "ds.csv"
    ds.write_text(HEADER
                  + "ok,h200-sxm,mixtral-8x7b,decode,1,512,0,16,graph,8.8,\n"
                  + "badmodel,h200-sxm,gpt-9,decode,1,512,0,16,graph,8.8,\n"
                  + "badhw,h900,mixtral-8x7b,decode,1,512,0,16,graph,8.8,\n")
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "validate", str(ds), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stderr          # exit 1: some results failed (README)
    assert res.stderr.count("\n") == 1 and "2 of 3 rows failed" in res.stderr
    report = json.loads(res.stdout)
    assert set(report) >= {"rows", "median_abs_error_pct", "max_abs_error_pct"}
    rows = {r["name"]: r for r in report["rows"]}
    assert set(rows["ok"]) >= {"name", "predicted_ms", "measured_ms", "error_pct"}
    assert rows["ok"]["predicted_ms"] > 0
    assert rows["badmodel"]["error_pct"] is None and "gpt-9" in rows["badmodel"]["error"]
    assert rows["badhw"]["error_pct"] is None and "h900" in rows["badhw"]["error"]
    assert report["failed"] == 2


def test_missing_column_is_a_clean_error(tmp_path):
    ds = tmp_path / "ds.csv"
    ds.write_text("name,hardware\nx,h200-sxm\n")
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "validate", str(ds)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "missing column" in res.stderr and "Traceback" not in res.stderr


def test_h200_test_grid_is_predicted_within_the_targets():
    """The second H200 grid (validation/data/h200_steps_extra.csv), measured after the
    calibration was set and never tuned on: issue 6's targets, 5% median and 15% max. (CI's
    validation/check_accuracy.py holds the first grid to the same targets.)"""
    rows = load_dataset(DATA.parent / "h200_steps_extra.csv")
    assert len(rows) >= 10 and all(r["launch"] == "graph" for r in rows)
    report = validate_rows(rows)
    assert report["failed"] == 0
    assert report["median_abs_error_pct"] <= 5
    assert report["max_abs_error_pct"] <= 15


@pytest.mark.parametrize("row, column", [
    ("r,h200-sxm,mixtral-8x7b,decode,1,512,0,16,graph,nan,", "measured_ms"),
    ("r,h200-sxm,mixtral-8x7b,decode,1,512,0,16,graph,abc,", "measured_ms"),
    ("r,h200-sxm,mixtral-8x7b,decodex,1,512,0,16,graph,8,", "phase"),
    ("r,h200-sxm,mixtral-8x7b,decode,one,512,0,16,graph,8,", "batch"),
    ("r,h200-sxm,mixtral-8x7b,decode,1,512,0,16,graph,8,a,b", None),
])
def test_malformed_rows_exit_2_naming_file_line_and_column(tmp_path, row, column):
    ds = tmp_path / "ds.csv"
    ds.write_text(HEADER + row + "\n")
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "validate", str(ds), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stdout == ""
    assert f"{ds}:2" in res.stderr
    if column:
        assert f"'{column}'" in res.stderr


def test_fractional_kv_bits_are_kept():
    """1.5 bits stays 1.5 (not 1 or 2): the KV bytes the row's scenario reads say so. (Its
    step time need not differ from 1 bit: software dequant is compute-bound at both.)"""
    from hwsim.validate import _row_scenario
    from hwsim.workload import kv_format

    bits_at = {}
    for bits in ("1", "1.5", "2"):
        row = load_dataset_text(f"r,h200-sxm,mixtral-8x7b,decode,4,32768,0,{bits},graph,50,")[0]
        cfg, _ = _row_scenario(row)
        assert cfg.kv_cache.bits == float(bits)
        bits_at[bits] = kv_format.from_config(cfg.kv_cache).bits_per_element(32768)
    assert bits_at["1"] < bits_at["1.5"] < bits_at["2"]


def load_dataset_text(row: str):
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as fh:
        fh.write(HEADER + row + "\n")
    return load_dataset(Path(fh.name))


def test_cudnn_steps_with_the_cudnn_attention_kernel():
    """Whole steps measured with PyTorch's default SDPA backend (cuDNN on the H200:
    validation/data/h200_steps_cudnn.csv), predicted with the cuDNN kernel its `overrides`
    column names."""
    rows = load_dataset(DATA.parent / "h200_steps_cudnn.csv")
    assert {r["overrides"] for r in rows} == {"runtime.attention_kernel=cudnn"}
    report = validate_rows(rows)
    assert report["failed"] == 0
    assert report["median_abs_error_pct"] <= 5
    assert report["max_abs_error_pct"] <= 15


def test_validate_rejects_a_bad_override_once_with_exit_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "validate", str(DATA), "--set", "runtime.bogus=1"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "runtime.bogus" in res.stderr and "Traceback" not in res.stderr


def test_signed_error_splits_and_row_overrides(tmp_path):
    """The mean signed error is the mean of the rows' signed errors (a bias a median hides),
    reported overall, per split and per model; a row's `overrides` reach its scenario."""
    ds = tmp_path / "ds.csv"
    ds.write_text("name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,"
                  "split,overrides\n"
                  "fast,h200-sxm,qwen3-30b-a3b,decode,1,512,0,16,graph,100000,cal,\n"
                  "slow,h200-sxm,qwen3-30b-a3b,decode,1,512,0,16,graph,0.001,test,\n"
                  "cudnn,h200-sxm,qwen3-30b-a3b,decode,64,4096,0,16,graph,5,test,runtime.attention_kernel=cudnn\n"
                  "flash,h200-sxm,qwen3-30b-a3b,decode,64,4096,0,16,graph,5,test,\n")
    report = validate_rows(load_dataset(ds))
    errs = {r["name"]: r["error_pct"] for r in report["rows"]}
    assert errs["fast"] < -99.9 and errs["slow"] > 1000            # predictions far from both
    assert report["mean_signed_error_pct"] == pytest.approx(sum(errs.values()) / 4)
    assert report["by_split"]["cal"]["mean_signed_error_pct"] == pytest.approx(errs["fast"])
    assert report["by_split"]["test"]["rows_predicted"] == 3
    assert report["by_model"]["qwen3-30b-a3b"]["rows_predicted"] == 4
    assert errs["cudnn"] != pytest.approx(errs["flash"], rel=1e-3)   # the override changed the kernel
