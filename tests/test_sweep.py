"""Sweeps: spec expansion, stable point ids, Dask execution, failures and resumption."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hwsim.errors import ConfigError
from hwsim.sweep.spec import load_sweep

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")


def spec(tmp_path, factors: str, extra: str = "") -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(f"name: t\nbase:\n  hardware: h200-sxm\n  model: {TINY}\n"
                 f"  workload: {{decode_steps: 1, context_tokens: 512}}\nfactors:\n{factors}{extra}")
    return p


def test_cartesian_product_coupled_keys_and_filter(tmp_path):
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1, 2, 4]\n"
                       "  - keys: [hardware, kv_cache.dequant]\n"
                       "    values: [[h200-sxm, software], [h200-decoder, decoder]]\n",
             "filter: \"p['workload.batch_size'] < 4 or p['hardware'] == 'h200-sxm'\"\n")
    _, points = load_sweep(p)
    assert len(points) == 5
    assert all(pt["scenario"]["kv_cache"]["dequant"] == ("decoder" if pt["factors"]["hardware"] == "h200-decoder"
                                                        else "software") for pt in points)


def test_point_ids_are_stable_hashes_of_the_resolved_config(tmp_path):
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1, 2]\n")
    a = [pt["hash"] for pt in load_sweep(p)[1]]
    b = [pt["hash"] for pt in load_sweep(p)[1]]
    assert a == b and len(set(a)) == 2
    p2 = spec(tmp_path, "  - key: workload.batch_size\n    values: [2, 3]\n")
    assert a[1] == load_sweep(p2)[1][0]["hash"]


def test_bad_spec_names_the_file(tmp_path):
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [0]\n")
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    assert e.value.file == str(p) and "batch_size" in (e.value.key or "")
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1]\n", "filter: \"p['nope'] > 1\"\n")
    with pytest.raises(ConfigError, match="filter"):
        load_sweep(p)


def test_sweep_runs_on_dask_records_failures_and_resumes(tmp_path):
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1, 2]\n"
                       "  - key: hardware_overrides.hbm.peak_bandwidth_gbps\n    values: [4800, 9600]\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "hwsim.cli", "sweep", str(p), "--out", str(out), "--json"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    s1 = json.loads(first.stdout)
    assert (s1["points"], s1["computed"], s1["reused"], s1["failed"]) == (4, 4, 0, 0)
    table = pd.read_parquet(s1["results"])
    assert len(table) == 4 and (table["status"] == "ok").all()
    fast = table[table["factor.hardware_overrides.hbm.peak_bandwidth_gbps"] == 9600]["itl_ms.p50"].mean()
    slow = table[table["factor.hardware_overrides.hbm.peak_bandwidth_gbps"] == 4800]["itl_ms.p50"].mean()
    assert fast < slow
    # an interrupted sweep loses nothing: drop one finished point, add a failing one, rerun
    part = sorted((out / "results").glob("part-*.parquet"))[0]
    part.unlink()
    p.write_text(p.read_text().replace("values: [1, 2]", "values: [1, 2]\n  - key: hardware\n"
                                                          "    values: [h200-sxm, no-such-chip]"))
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    s2 = json.loads(second.stdout)
    assert s2["points"] == 8 and s2["reused"] == 3 and s2["computed"] == 1 and s2["failed"] == 4
    table = pd.read_parquet(s2["results"])
    failed = table[table["status"] == "failed"]
    assert len(failed) == 4 and failed["error"].str.contains("no-such-chip").all()
    assert (out / "manifest.json").exists() and (out / "breakdown.png").exists()
