"""Issue 47 item 11: the environment's faults end in one line and exit 0 or 2, naming a path
where there is one: stdout closed, a reader that stops reading, an --out that is not text, a
manifest nested past any parser's depth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "tests" / "data" / "tiny-moe.yaml")
HWSIM = [sys.executable, "-m", "hwsim.cli"]
RUN = ["run", "--no-plots", "--set", f"model={TINY}", "--set", "workload.decode_steps=1"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def test_a_closed_stdout_is_no_traceback(tmp_path):
    p = subprocess.run(HWSIM + RUN + ["--out", str(tmp_path / "out")], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, env=ENV, timeout=120,
                       preexec_fn=lambda: os.close(1))
    assert "Traceback" not in p.stderr and p.returncode in (0, 2), p.stderr
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_a_reader_that_stops_early_is_exit_0(tmp_path):
    r, w = os.pipe()
    os.close(r)                           # the reader is gone before the first byte
    p = subprocess.run(HWSIM + RUN + ["--json", "--out", str(tmp_path / "out")], stdout=w,
                       stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
    os.close(w)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_an_out_folder_name_that_is_not_utf8_is_exit_2(tmp_path):
    out = os.fsencode(tmp_path) + b"/o\xff"
    p = subprocess.run([os.fsencode(a) for a in HWSIM + RUN] + [b"--out", out], capture_output=True,
                       env=ENV, timeout=120)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 2 and "UTF-8" in err and "--out" in err and len(err.splitlines()) == 1, err


def test_a_manifest_nested_past_any_depth_is_not_an_internal_error(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for args, words in ((RUN + ["--out", str(tmp_path / "out")], "not an hwsim bundle"),
                        (["report", str(tmp_path / "out")], "manifest.json")):
        p = subprocess.run(HWSIM + args, capture_output=True, text=True, env=ENV, timeout=120)
        assert p.returncode == 2 and words in p.stderr and str(tmp_path) in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


def test_mooncake_hash_ids_beyond_the_prompts_blocks_are_refused(tmp_path):
    from hwsim.errors import ConfigError
    from hwsim.serving.traces import read_trace
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}\n'
                    '{"timestamp": 5, "input_length": 600, "output_length": 4, "hash_ids": [1, 2, 3]}\n')
    try:
        read_trace(path)
    except ConfigError as exc:
        assert exc.line == 2 and exc.key == "hash_ids" and str(path) in str(exc)
    else:
        raise AssertionError("3 hash ids for a 600-token prompt (2 blocks of 512) were accepted")


@pytest.mark.parametrize("content, line, key", [
    ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
     "0.5,ChatGPT,100,20,120,Conversation log\n1.0,ChatGPT,999999999,20,1000000019,Conversation log\n",
     3, "Request tokens"),
    ('{"timestamp": 0, "input_length": 100, "output_length": 999999999}\n', 1, "output_length"),
])
def test_a_trace_row_longer_than_any_context_is_blamed_on_its_row(tmp_path, content, line, key):
    from hwsim.errors import ConfigError
    from hwsim.serving.traces import read_trace
    path = tmp_path / ("t.jsonl" if content.startswith("{") else "t.csv")
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        read_trace(path)
    assert (info.value.file, info.value.line, info.value.key) == (str(path), line, key)


def test_a_full_disk_names_the_folder_being_written(tmp_path, monkeypatch):
    import errno

    from typer.testing import CliRunner

    import hwsim.io.bundle
    from hwsim.cli import app

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(hwsim.io.bundle, "_write_files", full)
    res = CliRunner().invoke(app, RUN + ["--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "No space left" in res.stderr and str(tmp_path / "out") in res.stderr


def test_a_deleted_working_folder_is_named(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    p = subprocess.run(HWSIM + RUN, capture_output=True, text=True, env=ENV, timeout=120, cwd=gone,
                       preexec_fn=lambda: os.rmdir(gone))
    assert p.returncode == 2 and "working folder" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_killed_helper_process_is_not_called_a_bug():
    import signal

    from hwsim.io.forked import failure
    exc = failure(b"", signal.SIGKILL)          # waitpid's status of a child killed by SIGKILL
    assert isinstance(exc, OSError) and "killed by signal 9" in str(exc) and "bug" not in str(exc)


@pytest.mark.parametrize("fault", ["killed", "nanny"])
def test_a_dask_worker_killed_is_not_called_a_bug(monkeypatch, fault):
    from typer.testing import CliRunner

    import hwsim.whatif.sensitivity
    from hwsim.cli import app

    def dies(*args, **kwargs):
        if fault == "killed":       # distributed.scheduler.KilledWorker, as the scheduler raises it
            raise type("KilledWorker", (Exception,), {"__module__": "distributed.scheduler"})(
                "Attempted to run task 'run_chunk-1' on 3 different workers, but all those workers died")
        raise RuntimeError("Nanny failed to start.")
    monkeypatch.setattr(hwsim.whatif.sensitivity, "sensitivity", dies)
    res = CliRunner().invoke(app, ["sensitivity", "--set", "workload.decode_steps=1", "--workers", "2"])
    assert res.exit_code == 2 and "bug" not in res.stderr and "worker" in res.stderr, res.stderr


def test_an_unknown_model_says_what_a_model_file_is():
    from hwsim.config.files import load_model
    from hwsim.errors import ConfigError
    with pytest.raises(ConfigError, match="a model is a built-in name, a model YAML"):
        load_model("my/config.json")
