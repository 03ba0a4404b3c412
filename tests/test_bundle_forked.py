"""A bundle written side by side (figures drawn by a helper forked at the start, files dealt
to forked children) is the bundle written one file after another, byte for byte; a writer's
failure in another process ends the command as it would in this one."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import hwsim.io.forked
import hwsim.io.plotter
from hwsim.cli import app
from hwsim.io.forked import write_all

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")
FIXED = f"name: t\nhardware: h200-sxm\nmodel: {TINY}\nworkload: {{batch_size: 2, context_tokens: 512, decode_steps: 3}}\n"
SERVING = (f"name: s\nhardware: h200-sxm\nmodel: {TINY}\nworkload: {{arrivals: {{kind: poisson, rate_per_s: 50, requests: 30}}, "
           f"prompt: {{kind: fixed, tokens: 64}}, output: {{kind: fixed, tokens: 8}}}}\n")


def files_of(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["files"]


def run(tmp_path: Path, text: str, out: str, idle: float, monkeypatch, *extra) -> object:
    monkeypatch.setattr(hwsim.io.forked, "idle_cpus", lambda: idle)
    monkeypatch.setattr(hwsim.io.plotter, "idle_cpus", lambda: idle)
    (tmp_path / "s.yaml").write_text(text)
    return CliRunner().invoke(app, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / out), "--plots",
                                    *extra])


@pytest.mark.parametrize("scenario", [FIXED, SERVING], ids=["fixed-batch", "serving"])
def test_side_by_side_bundle_equals_the_one_written_in_turn(tmp_path, monkeypatch, scenario):
    alone = run(tmp_path, scenario, "alone", 0.0, monkeypatch, "--trace")
    forked = run(tmp_path, scenario, "forked", 3.0, monkeypatch, "--trace")
    assert alone.exit_code == forked.exit_code == 0, (alone.stderr, forked.stderr)
    a, b = files_of(tmp_path / "alone"), files_of(tmp_path / "forked")
    assert a == b and any(name.endswith(".png") for name in a)
    for name, digest in b.items():
        assert hashlib.sha256((tmp_path / "forked" / name).read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("fault,code", [
    (KeyboardInterrupt(), 130),
    (RuntimeError("late failure while plotting"), 1),
    (OSError(errno.ENOSPC, "No space left on device"), 2),
])
@pytest.mark.parametrize("figure", ["hwsim.plots.breakdown:save_breakdown_png",
                                    "hwsim.plots.gantt:save_gantt_png"])
def test_a_fault_in_a_forked_writer_ends_the_run_as_it_would_here(tmp_path, monkeypatch, fault, code, figure):
    import importlib
    module, function = figure.split(":")

    def broken(*args, **kwargs):
        raise fault
    monkeypatch.setattr(importlib.import_module(module), function, broken)
    res = run(tmp_path, FIXED, "out", 3.0, monkeypatch)
    assert res.exit_code == code, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if ".hwsim-" in p.name] == []


def test_write_all_runs_every_job_once_across_processes(tmp_path):
    if threading.active_count() > 1:
        pytest.skip("an earlier test left a thread running: write_all forks no threaded process")
    def write(i):
        time.sleep(0.2)                     # long enough for the other processes to take some
        (tmp_path / f"f{i}").write_text(f"{i} {os.getpid()}")
    write_all([(f"f{i}", 1.0, lambda i=i: write(i)) for i in range(5)], workers=3)
    written = sorted(p.read_text().split() for p in tmp_path.iterdir())
    assert [w[0] for w in written] == [str(i) for i in range(5)]
    assert 2 <= len({w[1] for w in written}) <= 3            # in this process and its children


def test_write_all_keeps_a_bundle_one_file_dominates_in_this_process(tmp_path):
    """Side by side cannot end before the costliest file, so a bundle whose costliest file costs
    as much as the rest together is written here, not in a child forked from the run's heap."""
    def write(i):
        time.sleep(0.2)                     # long enough for a forked child to take some
        (tmp_path / f"f{i}").write_text(f"{os.getpid()}")
    write_all([("big", 3.0, lambda: write(0)), ("a", 1.0, lambda: write(1)), ("b", 1.0, lambda: write(2))],
              workers=3)
    assert {p.read_text() for p in tmp_path.iterdir()} == {str(os.getpid())}
