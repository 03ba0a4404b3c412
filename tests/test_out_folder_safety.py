"""`hwsim run --out DIR` replaces only what is provably an hwsim run bundle, deletes only the
files that bundle lists, and refuses a folder another hwsim process is writing (issue 29)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil

from test_bad_inputs import BASE, assert_clean, invoke, old_bundle, snapshot, write, ws  # noqa: F401


def test_a_folder_with_someones_manifest_json_is_not_replaced(ws):
    app = ws / "webapp"
    app.mkdir()
    (app / "manifest.json").write_text('{"name": "my web app", "files": {}}')
    (app / "index.js").write_text("console.log('mine')\n")
    before = snapshot(app)
    res, t = invoke(["run", write(ws, "s.yaml", BASE), "--out", app])
    assert_clean(res, t, 2, (str(app), "--out", "not an hwsim bundle"))
    assert snapshot(app) == before


def test_a_sweep_folder_is_not_replaced_by_a_run(ws):
    sweep = ws / "study"
    (sweep / "results").mkdir(parents=True)
    (sweep / "results.parquet").write_bytes(b"PAR1")
    (sweep / "manifest.json").write_text(json.dumps({"sweep": {"name": "s"}, "summary": {}, "files": {}}))
    before = snapshot(sweep)
    res, t = invoke(["run", write(ws, "s.yaml", BASE), "--out", sweep])
    assert_clean(res, t, 2, "not an hwsim bundle")
    assert snapshot(sweep) == before


def test_a_bundle_holding_a_file_it_does_not_list_is_not_replaced(ws):
    (ws / "out" / "notes.txt").write_text("my notes on this run\n")
    before = snapshot(ws / "out")
    res, t = invoke(["run", write(ws, "s.yaml", BASE), "--out", ws / "out"])
    assert_clean(res, t, 2, "not an hwsim bundle")
    assert snapshot(ws / "out") == before


def test_a_manifest_without_hwsims_marker_is_not_a_bundle(ws):
    manifest = json.loads((ws / "out" / "manifest.json").read_text())
    assert manifest["hwsim_bundle"] == 1
    del manifest["hwsim_bundle"]
    del manifest["resolved_config"]          # neither the marker nor an older hwsim's own keys
    (ws / "out" / "manifest.json").write_text(json.dumps(manifest))
    res, t = invoke(["run", write(ws, "s.yaml", BASE), "--out", ws / "out"])
    assert_clean(res, t, 2, "not an hwsim bundle")


def test_a_bundle_and_its_report_page_are_replaced(ws):
    (ws / "out" / "index.html").write_text("<!doctype html><html><head><title>hwsim report</title>")
    res, _ = invoke(["run", write(ws, "s.yaml", BASE.replace("seed: 0", "seed: 1")), "--out", ws / "out"])
    assert res.exit_code == 0, res.stderr
    assert json.loads((ws / "out" / "manifest.json").read_text())["seed"] == 1
    assert not (ws / "out" / "index.html").exists()
    assert sorted(p.name for p in ws.iterdir()) == ["out", "s.yaml"]     # no lock file left


def test_a_folder_another_process_writes_is_refused(ws):
    lock = ws / ".out.hwsim-lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"4242")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        before = snapshot(ws / "out")
        res, t = invoke(["run", write(ws, "s.yaml", BASE), "--out", ws / "out"])
        assert_clean(res, t, 2, ("--out", "another hwsim process (pid 4242)"))
        assert snapshot(ws / "out") == before
    finally:
        os.close(fd)


def test_a_killed_run_leaves_no_lock_behind_in_its_forked_children(ws):
    """A run killed while its forked bundle writers still run (SIGKILL reaches the parent only):
    the children hold none of its locks, so the next run is not refused."""
    import subprocess
    import sys

    from hwsim.io import folder_lock
    child = ws / "child.pid"
    script = (f"import os, time\nfrom hwsim.io import folder_lock\nfolder_lock.acquire({str(ws / 'out')!r})\n"
              f"pid = os.fork()\nif pid == 0:\n    time.sleep(5)\n    os._exit(0)\n"
              f"open({str(child)!r}, 'w').write(str(pid))\nos._exit(0)\n")      # dies holding the lock
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    try:
        folder_lock.acquire(ws / "out")          # the writer is dead, its child sleeps on: not refused
        folder_lock.release(ws / "out")
    finally:
        os.kill(int(child.read_text()), 9)


def test_a_symlink_in_a_bundle_makes_it_not_ours(ws):
    os.symlink("/etc/hostname", ws / "out" / "breakdown.csv.bak")
    res, t = invoke(["run", write(ws, "s.yaml", BASE), "--out", ws / "out"])
    assert_clean(res, t, 2, "not an hwsim bundle")
    assert os.path.islink(ws / "out" / "breakdown.csv.bak")
    shutil.rmtree(ws / "out")
