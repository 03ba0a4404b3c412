"""Sweeps simulate what they hashed, check every point before Dask starts, keep only the
parts their index references, and refuse unbounded or malformed specs (issue 29). No Dask
cluster is started here: points run through run_point, and run_sweep only gathers."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from hwsim.cli import app
from hwsim.errors import ConfigError
from hwsim.sweep.point import run_point
from hwsim.sweep.runner import run_sweep
from hwsim.sweep.spec import load_sweep

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")
H200 = Path(__file__).resolve().parents[1] / "hardware_profiles" / "h200-sxm.yaml"


def spec(tmp_path: Path, factors: str, extra: str = "", hardware: str = "h200-sxm") -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(f"name: t\nbase:\n  hardware: {hardware}\n  model: {TINY}\n"
                 f"  workload: {{decode_steps: 1, context_tokens: 512}}\nfactors:\n{factors}{extra}")
    return p


@pytest.fixture
def own_profile(tmp_path, monkeypatch) -> Path:
    """h200-sxm copied as `mine` (found through HWSIM_HOME), to be edited."""
    (tmp_path / "hardware_profiles").mkdir()
    path = tmp_path / "hardware_profiles" / "mine.yaml"
    data = yaml.safe_load(H200.read_text())
    data["name"] = "mine"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("HWSIM_HOME", str(tmp_path))
    return path


def test_a_profile_edited_while_the_sweep_runs_does_not_change_its_points(tmp_path, own_profile):
    _, points = load_sweep(spec(tmp_path, "  - key: workload.batch_size\n    values: [1]\n", hardware="mine"))
    before = run_point(points[0])
    data = yaml.safe_load(own_profile.read_text())
    data["hbm"]["peak_bandwidth_gbps"]["value"] /= 4           # edited after the points were made
    own_profile.write_text(yaml.safe_dump(data))
    during = run_point(points[0])
    assert before["status"] == during["status"] == "ok", during.get("error")
    assert during["itl_ms.p50"] == before["itl_ms.p50"]
    # ... and the same spec loaded now is other points, computed with the edited profile
    _, edited = load_sweep(spec(tmp_path, "  - key: workload.batch_size\n    values: [1]\n", hardware="mine"))
    assert edited[0]["hash"] != points[0]["hash"]
    assert run_point(edited[0])["itl_ms.p50"] > before["itl_ms.p50"]


def test_a_point_hash_covers_the_shipped_profile_and_model(tmp_path):
    _, points = load_sweep(spec(tmp_path, "  - key: hardware_overrides.hbm.peak_bandwidth_gbps\n"
                                          "    values: [4800, 9600]\n"))
    assert [p["profile"]["hbm"]["peak_bandwidth_gbps"]["value"] for p in points] == [4800, 9600]
    assert points[0]["model"]["name"] and points[0]["hash"] != points[1]["hash"]


def test_a_hardware_override_typo_fails_the_spec_before_any_worker(tmp_path):
    p = spec(tmp_path, "  - key: hardware_overrides.hbm.peak_bandwith_gbps\n    values: [4800]\n")
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    assert e.value.file == str(p) and e.value.line == 6 and "peak_bandwith_gbps" in e.value.key


def test_a_cross_check_failure_fails_the_spec(tmp_path):
    p = spec(tmp_path, "  - key: kv_cache.dequant\n    values: [software, decoder]\n")
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    assert e.value.file == str(p) and e.value.key == "kv_cache.dequant" and "decoder" in e.value.message


def test_a_million_point_sweep_is_refused_before_it_is_enumerated(tmp_path):
    values = "[" + ", ".join(str(i) for i in range(1, 1001)) + "]"
    p = spec(tmp_path, f"  - key: workload.batch_size\n    values: {values}\n"
                       f"  - key: workload.context_tokens\n    values: {values}\n")
    with pytest.raises(ConfigError, match="1,000,000 combinations") as e:
        load_sweep(p)
    assert e.value.key == "factors" and e.value.line == 6


@pytest.mark.parametrize("base, problem", [("hello world\n", "not a YAML mapping"),
                                            ("- a\n- b\n", "not a YAML mapping"),
                                            ("\x00\x01binary", "NUL")])
def test_a_base_that_is_not_a_scenario_is_refused(tmp_path, base, problem):
    (tmp_path / "base.txt").write_text(base)
    p = tmp_path / "sweep.yaml"
    p.write_text("name: t\nbase: base.txt\nfactors:\n  - key: workload.batch_size\n    values: [1]\n")
    with pytest.raises(ConfigError, match=problem):
        load_sweep(p)


def test_a_factor_through_a_scalar_of_the_base_is_refused(tmp_path):
    p = tmp_path / "sweep.yaml"
    p.write_text(f"name: t\nbase: {{model: {TINY}, workload: 3}}\nfactors:\n"
                 "  - key: workload.batch_size\n    values: [1]\n")
    with pytest.raises(ConfigError, match="not a mapping") as e:
        load_sweep(p)
    assert e.value.file == str(p)


def test_stale_and_torn_parts_are_removed_when_the_index_is_rewritten(tmp_path):
    _, points = load_sweep(spec(tmp_path, "  - key: workload.batch_size\n    values: [1]\n"))
    out = tmp_path / "out"
    (out / "results").mkdir(parents=True)
    kept = out / "results" / f"part-{points[0]['hash']}.parquet"
    pd.DataFrame([{"point": points[0]["hash"], "status": "ok", "error": None}]).to_parquet(kept)
    stale = out / "results" / "part-0123456789abcdef.parquet"
    pd.DataFrame([{"point": "0123456789abcdef", "status": "ok", "error": None}]).to_parquet(stale)
    torn = out / "results" / "part-fedcba9876543210.parquet"
    torn.write_bytes(b"PAR1 torn")
    summary = run_sweep(points, out)            # every point finished: no cluster starts
    assert summary["reused"] == 1 and summary["computed"] == 0
    assert sorted(p.name for p in (out / "results").iterdir()) == [kept.name]


@pytest.mark.parametrize("address", ["not a url", "http://host:8786", "tcp://host:99999", ""])
def test_a_malformed_scheduler_address_exits_2(tmp_path, address):
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1]\n")
    res = CliRunner().invoke(app, ["sweep", str(p), "--out", str(tmp_path / "o"), "--scheduler", address])
    assert res.exit_code == 2, (res.stderr, res.exception)
    assert "--scheduler" in res.stderr and "Traceback" not in res.stderr


def test_a_filter_with_a_huge_power_exits_2(tmp_path):
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1]\n", "filter: \"(10**64)**64 > 1\"\n")
    res = CliRunner().invoke(app, ["sweep", str(p), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, (res.stderr, res.exception)
    assert f"{p}:9" in res.stderr and "too large" in res.stderr


def test_a_trace_edited_while_the_sweep_runs_fails_its_point(tmp_path):
    trace = tmp_path / "routing.csv"
    rows = "".join(f"{s},{layer},0,0 1\n" for s in range(2) for layer in range(4))
    trace.write_text("step,layer,token,experts\n" + rows)
    p = spec(tmp_path, "  - key: workload.batch_size\n    values: [1]\n",
             f"  - key: moe.routing.trace\n    values: [{trace}]\n"
             "  - key: moe.routing.kind\n    values: [trace]\n")
    _, points = load_sweep(p)
    assert run_point(points[0])["status"] == "ok"
    trace.write_text("step,layer,token,experts\n" + rows.replace("0 1", "2 3"))
    row = run_point(points[0])
    assert row["status"] == "failed" and "changed while the sweep ran" in row["error"]
