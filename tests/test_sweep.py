"""Sweeps: spec expansion, stable point ids, Dask execution, failures and resumption."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import free_port
from typer.testing import CliRunner

from hwsim.cli import app
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


def test_sweep_runs_on_dask_records_failures_and_resumes(tmp_path, dask_scheduler):
    p = spec(tmp_path, "  - key: hardware_overrides.hbm.peak_bandwidth_gbps\n    values: [4800, 9600]\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "hwsim.cli", "sweep", str(p), "--out", str(out), "--json"]
    # the first run on the embedded LocalCluster (the default), the others on the shared one
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    s1 = json.loads(first.stdout)
    assert (s1["points"], s1["computed"], s1["reused"], s1["failed"]) == (2, 2, 0, 0)
    table = pd.read_parquet(s1["results"])
    assert len(table) == 2 and (table["status"] == "ok").all()
    fast = table[table["factor.hardware_overrides.hbm.peak_bandwidth_gbps"] == 9600]["itl_ms.p50"].mean()
    slow = table[table["factor.hardware_overrides.hbm.peak_bandwidth_gbps"] == 4800]["itl_ms.p50"].mean()
    assert fast < slow
    # an interrupted sweep loses nothing: drop one finished point, add a failing one, rerun
    part = sorted((out / "results").glob("part-*.parquet"))[0]
    part.unlink()
    # a point that a single run would refuse (an override naming no profile number) fails the
    # spec before any worker starts (exit 2), and leaves the results as they were
    p.write_text(p.read_text().replace("values: [4800, 9600]", "values: [4800, 9600]\n"
                                                              "  - key: hardware_overrides.hbm.bus_width\n"
                                                              "    values: [1]"))
    on_shared = ["sweep", str(p), "--out", str(out), "--scheduler", dask_scheduler, "--json"]
    broken = CliRunner().invoke(app, on_shared)
    assert broken.exit_code == 2 and "bus_width" in broken.stderr and f"{p}:" in broken.stderr, broken.stderr
    assert len(list((out / "results").glob("part-*.parquet"))) == 1
    p.write_text(p.read_text().replace("\n  - key: hardware_overrides.hbm.bus_width\n    values: [1]", ""))
    second = CliRunner().invoke(app, on_shared)
    s2 = json.loads(second.stdout)
    assert s2["points"] == 2 and s2["reused"] == 1 and s2["computed"] == 1 and s2["failed"] == 0
    assert len(pd.read_parquet(s2["results"])) == 2
    assert (out / "manifest.json").exists() and (out / "breakdown.png").exists()


def test_sweep_on_an_external_scheduler(tmp_path, dask_scheduler):
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1, 2]\n")
    res = CliRunner().invoke(app, ["sweep", str(p), "--out", str(tmp_path / "o"), "--scheduler", dask_scheduler,
                                   "--json"])
    assert res.exit_code == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["computed"] == 2 and s["failed"] == 0


def test_killed_sweep_resumes_computing_only_the_missing_points(tmp_path, dask_scheduler):
    import time
    values = ", ".join(str(b) for b in range(1, 13))
    p = spec(tmp_path, f"  - key: workload.batch_size\n    values: [{values}]\n")
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "hwsim.cli", "sweep", str(p), "--out", str(out), "--scheduler", dask_scheduler,
           "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and len(list((out / "results").glob("part-*.parquet"))) < 3:
        time.sleep(0.05)
    proc.kill()                                   # the client dies part-way
    proc.wait()
    done_before = len(list((out / "results").glob("part-*.parquet")))
    assert 3 <= done_before < 12
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    s = json.loads(res.stdout)
    assert s["reused"] >= done_before and s["reused"] + s["computed"] == 12 and s["failed"] == 0
    table = pd.read_parquet(s["results"])
    assert len(table) == 12 and table["point"].is_unique


def test_unreachable_scheduler_and_bad_factors_exit_2_quickly(tmp_path):
    import time
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1]\n")
    t0 = time.time()
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "sweep", str(p), "--out", str(tmp_path / "o"),
                          "--scheduler", f"tcp://127.0.0.1:{free_port()}"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and "cannot reach" in res.stderr and time.time() - t0 < 30
    for factors in ("  - key: workload.no_such_key\n    values: [1]\n", "  - key: workload.batch_size\n    values: []\n",
                    "  - key: hardware\n    values: [h200-sxmm]\n"):
        bad = spec(tmp_path, factors)
        res = CliRunner().invoke(app, ["sweep", str(bad)])     # refused before any cluster starts
        assert res.exit_code == 2 and "sweep.yaml" in res.stderr and "Traceback" not in res.stderr
