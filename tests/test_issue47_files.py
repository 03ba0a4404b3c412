"""Issue 47, files lost and pages that run script: a planted link beside --out, or --out a
link, never makes hwsim delete through it; every value from a bundle is escaped in a report."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwsim.cli import app

DATA = Path(__file__).parent / "data"
TINY = str(DATA / "tiny-moe.yaml")
SCENARIO = (f"name: tiny\nhardware: h200-sxm\nmodel: {TINY}\nseed: 1\n"
            f"workload: {{batch_size: 1, context_tokens: 512, decode_steps: 1}}\n")


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("links")
    (root / "s.yaml").write_text(SCENARIO)
    res = invoke("run", root / "s.yaml", "--out", root / "bundle", "--no-plots")
    assert res.exit_code == 0, res.stderr
    return root / "bundle"


@pytest.fixture
def ws(tmp_path, monkeypatch, bundle):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(bundle, tmp_path / "victim")
    (tmp_path / "s.yaml").write_text(SCENARIO)
    return tmp_path


@pytest.mark.parametrize("marker", ["old", "tmp"])
def test_a_planted_link_named_like_a_leftover_is_never_followed(ws, marker):
    before = snapshot(ws / "victim")
    os.symlink("victim", ws / f".out.hwsim-{marker}-999999-x")
    res = invoke("run", ws / "s.yaml", "--out", ws / "out", "--no-plots")
    assert res.exit_code == 0, res.stderr
    assert snapshot(ws / "victim") == before
    assert not (ws / "out").is_symlink() and (ws / "out" / "manifest.json").is_file()


def test_out_that_is_a_link_is_refused_and_its_target_kept(ws):
    before = snapshot(ws / "victim")
    os.symlink("victim", ws / "out")
    res = invoke("run", ws / "s.yaml", "--out", ws / "out", "--no-plots")
    assert res.exit_code == 2 and "link" in res.stderr and "out" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert snapshot(ws / "victim") == before and (ws / "out").is_symlink()


SCRIPT = "<script>alert(47)</script>"


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _leaves(value, path + (key,))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _leaves(value, path + (i,))
    else:
        yield path


def _poisoned(manifest, path):
    poisoned = json.loads(json.dumps(manifest))
    node = poisoned
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = SCRIPT
    return poisoned


def _assert_no_script(manifest, folder):
    from hwsim.errors import ConfigError
    from hwsim.report import _render

    try:
        page, _ = _render(folder, manifest)
    except (ConfigError, KeyError, TypeError, AttributeError, ValueError):
        return                              # refused (render() says so on one line): nothing runs
    assert SCRIPT not in page


def test_script_in_any_field_of_a_sweep_manifest_is_escaped(tmp_path):
    manifest = {"sweep": {"name": "s", "factors": {"batch": [1, 2]}}, "plots": [],
                "summary": {"points": 2, "computed": 1, "reused": 1, "failed": 0},
                "provenance": {"hwsim_version": "0"}}
    for path in _leaves(manifest):
        _assert_no_script(_poisoned(manifest, path), tmp_path)


def test_script_in_any_field_of_a_run_manifest_is_escaped(bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["sensitivity"] = {"step": 0.1, "no_effect": ["a"],
                               "rows": [{"key": "k", "itl_elasticity": 0.1, "itl_ms_gained_10pct": 0.2}]}
    for path in _leaves(manifest):
        _assert_no_script(_poisoned(manifest, path), bundle)


def test_a_sweeps_points_table_is_sorted_and_has_no_empty_column(tmp_path):
    import pandas as pd

    from hwsim.report import _sweep_sections
    pd.DataFrame({"factor.workload.batch_size": [8, 1, 4], "status": ["ok"] * 3, "itl_ms.p50": [3.0, 1.0, 2.0],
                  "error": [None, None, None]}).to_parquet(tmp_path / "results.parquet")
    page = "".join(_sweep_sections(tmp_path, {"sweep": {"name": "s"},
                                              "summary": {"points": 3, "computed": 3, "reused": 0, "failed": 0}}))
    assert "<th>error</th>" not in page
    assert page.index("<td>1</td>") < page.index("<td>4</td>") < page.index("<td>8</td>")
