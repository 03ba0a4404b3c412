"""Work that grows without bound is estimated from every input that scales it, capped in
memory (--max-gb, enforced), and reported while it runs (issue 29)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from pathlib import Path

from typer.testing import CliRunner

from hwsim.cli import _progress, app
from hwsim.pipeline import system
from hwsim.cost import estimate
from hwsim.config.load import load_model, load_scenario

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "tests" / "data" / "tiny-moe.yaml")


def closed_loop(users: int, requests: int):
    cfg = load_scenario(None, [f"model={TINY}", "workload.arrivals.kind=closed", "workload.arrivals.think_ms=0",
                               "workload.max_batch_size=8",
                               f"workload.arrivals.users={users}", f"workload.arrivals.requests={requests}",
                               "workload.prompt.tokens=16", "workload.output.tokens=4"])
    return cfg, load_model(cfg.model), system      # a large one is rehearsed on a system built by `build`


def test_the_estimate_counts_closed_loop_users():
    few, many = estimate(*closed_loop(8, 100_000)), estimate(*closed_loop(100_000, 100_000))
    assert many.memory_gb > few.memory_gb + 0.5          # 100,000 users' processes and streams
    # users past the requests never start (hwsim.serving.loop), and cost nothing
    assert estimate(*closed_loop(100_000, 64)).memory_gb == estimate(*closed_loop(64, 64)).memory_gb


def test_users_past_the_requests_are_never_started():
    from hwsim.serving.disaggregation import serving_loop

    cfg, _, _ = closed_loop(100_000, 3)
    loop = serving_loop(system(cfg))
    finished = loop.run()
    assert len(finished) == 3
    assert isinstance(loop.waiting, deque)             # FIFO admission pops its head in O(1)
    assert len(loop.streams._streams) <= 3 * 3 + 8, len(loop.streams._streams)


def test_max_gb_is_enforced_when_the_estimate_is_wrong(tmp_path):
    """A run that allocates far more than estimated (here: 4 GB in one piece, after an estimate
    of a few hundred MB) ends in one error line and exit 2, not in the OOM killer."""
    code = ("import sys, hwsim.run\n"
            "def greedy(*a, **k):\n"
            "    return bytearray(4 * 10**9)\n"
            "hwsim.run.run_scenario = greedy\n"
            "from hwsim.cli import main\n"
            f"sys.argv = ['hwsim', 'run', '--set', 'model={TINY}', '--set', 'workload.decode_steps=1',\n"
            f"            '--out', {str(tmp_path / 'b')!r}, '--max-gb', '1']\n"
            "main()\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "out of memory" in lines[0] and "--max-gb" in lines[0], res.stderr
    assert not (tmp_path / "b").exists()


def test_progress_and_time_left_are_printed_when_stderr_is_no_terminal(tmp_path, monkeypatch):
    monkeypatch.setattr(_progress, "LINE_EVERY_S", 0.0)
    res = CliRunner().invoke(app, ["run", "--set", f"model={TINY}", "--set", "workload.decode_steps=4",
                                   "--out", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("progress:")]
    assert lines and "of 4 done" in lines[-1] and "left" in lines[0], res.stderr
    assert res.stdout.startswith("{")                    # --json's stdout untouched


def test_a_short_run_prints_no_progress(tmp_path):
    res = CliRunner().invoke(app, ["run", "--set", f"model={TINY}", "--set", "workload.decode_steps=2",
                                   "--out", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0 and res.stderr == "", res.stderr
