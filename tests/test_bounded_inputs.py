"""Every file hwsim reads goes through one bounded reader (hwsim.io.bounded): a regular file
only, at most so many bytes and lines, else one error line and exit 2 (issue 29). A device or
a FIFO is never opened for reading: the FIFO cases run in a subprocess with a timeout, since
before the fix they blocked forever."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_bad_inputs import BASE, TINY, assert_clean, invoke, old_bundle, write, ws  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def hwsim(*args, cwd: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "hwsim.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def fifo(ws) -> Path:
    path = ws / "pipe.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("args", [
    lambda ws, f: ["run", f, "--out", ws / "b"],
    lambda ws, f: ["validate", f],
    lambda ws, f: ["sweep", f, "--out", ws / "sw"],
    lambda ws, f: ["run", write(ws, "s.yaml", BASE), "--set", f"hardware={f}", "--out", ws / "b"],
    lambda ws, f: ["run", write(ws, "s.yaml", BASE), "--set", "moe.routing.kind=trace",
                   "--set", f"moe.routing.trace={f}", "--out", ws / "b"],
], ids=["scenario", "validate-csv", "sweep-spec", "profile", "routing-trace"])
def test_a_fifo_is_refused_without_blocking(ws, fifo, args):
    res = hwsim(*args(ws, fifo), cwd=ws)
    assert res.returncode == 2, res.stderr
    assert "not a regular file" in res.stderr and str(fifo) in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_a_fifo_request_trace_is_refused_without_blocking(ws, fifo):
    res = hwsim("run", "--set", f"model={TINY}", "--set", "workload.arrivals.kind=trace",
                "--set", f"workload.arrivals.trace={fifo}", "--out", ws / "b", cwd=ws)
    assert res.returncode == 2, res.stderr
    assert "not a regular file" in res.stderr and "workload.arrivals.trace" in res.stderr, res.stderr


@pytest.mark.parametrize("args", [
    lambda ws: ["run", "/dev/zero", "--out", ws / "b"],
    lambda ws: ["validate", "/dev/zero"],
    lambda ws: ["sweep", "/dev/zero"],
    lambda ws: ["run", write(ws, "s.yaml", BASE + "moe:\n  routing:\n    kind: trace\n    trace: /dev/zero\n"),
                "--out", ws / "b"],
    lambda ws: ["run", write(ws, "s.yaml", BASE), "--set", f"model={ws}", "--out", ws / "b"],
], ids=["scenario", "validate-csv", "sweep-spec", "routing-trace", "model-is-a-folder"])
def test_a_device_or_folder_is_refused(ws, args):
    res, t = invoke(args(ws))
    assert_clean(res, t, 2)
    assert "not a regular file" in res.stderr or "is a folder" in res.stderr or "unknown model" in res.stderr


def test_a_nul_byte_in_a_yaml_file_names_its_line(ws):
    res, t = invoke(["run", write(ws, "s.yaml", BASE + "notes: a\0b\n"), "--out", ws / "b"])
    assert_clean(res, t, 2, ("s.yaml:10", "NUL"))


def test_a_yaml_file_of_too_many_lines_is_refused(ws):
    res, t = invoke(["run", write(ws, "s.yaml", BASE + "#\n" * 100_001), "--out", ws / "b"])
    assert_clean(res, t, 2, ("s.yaml", "more than 100,000 lines"))


def test_a_routing_trace_of_too_many_lines_is_refused(ws, monkeypatch):
    from hwsim.io import bounded

    monkeypatch.setitem(bounded.LIMITS, "routing trace", bounded.Limit("routing trace", 2**20, 3))
    trace = write(ws, "r.csv", "step,layer,token,experts\n" + "0,0,0,0 1\n" * 5)
    res, t = invoke(["run", write(ws, "s.yaml", BASE), "--set", "moe.routing.kind=trace",
                     "--set", f"moe.routing.trace={trace}", "--out", ws / "b"])
    assert_clean(res, t, 2, ("r.csv:4", "more than 3 lines", "moe.routing.trace"))


def test_a_binary_stream_is_bounded_inflated_too(tmp_path):
    from hwsim.errors import ConfigError
    from hwsim.io.bounded import Limit, open_binary

    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(b"[" + b" " * 100_000 + b"]"))
    assert os.path.getsize(path) < 1000
    with open_binary(path, Limit("kernel trace", 200_000), gunzip=True) as fh:
        assert len(fh.read()) == 100_002
    with pytest.raises(ConfigError, match="more than 50,000 bytes"):
        with open_binary(path, Limit("kernel trace", 50_000), gunzip=True) as fh:
            while fh.read(4096):
                pass
    path.write_bytes(b"not gzip at all")
    with pytest.raises(ConfigError, match="not a valid gzip file"):
        with open_binary(path, Limit("kernel trace", 50_000), gunzip=True) as fh:
            fh.read()
