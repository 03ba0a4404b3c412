"""Issue 47, files lost and pages that run script: a planted link beside --out, or --out a
link, never makes hwsim delete through it; every value from a bundle is escaped in a report."""

from __future__ import annotations

import hashlib
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
