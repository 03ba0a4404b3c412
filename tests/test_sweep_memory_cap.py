"""`hwsim sweep --max-gb` caps each point's memory in its worker, as `hwsim run --max-gb` caps a
run's (RLIMIT_DATA, hwsim.cost): a point that needs more fails alone, with the reason,
and the worker's own limit is put back after each point (issue 33)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "tests" / "data" / "tiny-moe.yaml")

# a point of batch 2 asks for 4 GB in one piece (far past its estimate); calloc'd, so without a
# cap it succeeds without touching the memory. Loaded in every process of the test's sweep
# (sitecustomize), its Dask workers included.
GREEDY = """
import hwsim.sweep.groups as groups
_summary = groups.GroupPlans.summary
def summary(self, cfg, *args, **kwargs):
    if cfg.workload.batch_size == 2:
        bytearray(4 * 10**9)
    return _summary(self, cfg, *args, **kwargs)
groups.GroupPlans.summary = summary
"""


def test_a_point_over_max_gb_fails_alone_with_the_reason(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(GREEDY)
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"name: t\nbase:\n  hardware: h200-sxm\n  model: {TINY}\n"
                    f"  workload: {{decode_steps: 1, context_tokens: 512}}\nfactors:\n"
                    f"  - key: workload.batch_size\n    values: [2, 1]\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "sweep", str(spec), "--workers", "1",
                          "--out", str(tmp_path / "out"), "--max-gb", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert res.returncode == 1, res.stderr            # a point failed; the sweep itself did not
    table = pd.read_parquet(tmp_path / "out" / "results.parquet").set_index("factor.workload.batch_size")
    assert table.loc[1, "status"] == "ok"
    assert table.loc[2, "status"] == "failed"
    assert "out of memory" in table.loc[2, "error"] and "--max-gb" in table.loc[2, "error"]
    assert "capped at 1 GB" in table.loc[2, "error"]


CHECK = """
import resource, sys
from unittest import mock
import hwsim.sweep.groups as groups
from hwsim.sweep.spec import load_sweep

_summary = groups.GroupPlans.summary
seen = []
def summary(self, cfg, *args, **kwargs):
    seen.append(resource.getrlimit(resource.RLIMIT_DATA)[0])
    if cfg.workload.batch_size == 2:
        bytearray(4 * 10**9)
    return _summary(self, cfg, *args, **kwargs)
groups.GroupPlans.summary = summary
before = resource.getrlimit(resource.RLIMIT_DATA)
_, points = load_sweep(__import__("pathlib").Path(sys.argv[1]))
with mock.patch.object(groups, "_alone_in_process", lambda pid: True):
    rows = groups.run_group(points, max_gb=1.0, client_pid=None)
assert [r["status"] for r in rows] == ["failed", "ok"], rows
assert "out of memory" in rows[0]["error"], rows[0]["error"]
assert all(0 < s < 2 * 10**9 for s in seen), seen                  # each point ran capped
assert resource.getrlimit(resource.RLIMIT_DATA) == before          # and the limit is back
rows = groups.run_group(points, max_gb=1.0, client_pid=None)        # not on a worker: no cap
assert [r["status"] for r in rows] == ["ok", "ok"], rows
print("checked")
"""


def test_the_cap_holds_for_each_point_and_is_put_back(tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"name: t\nbase:\n  hardware: h200-sxm\n  model: {TINY}\n"
                    f"  workload: {{decode_steps: 1, context_tokens: 512}}\nfactors:\n"
                    f"  - key: workload.batch_size\n    values: [2, 1]\n")
    res = subprocess.run([sys.executable, "-c", CHECK, str(spec)], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0 and "checked" in res.stdout, res.stderr


def test_the_cap_is_set_only_in_a_worker_process_of_one_thread():
    from dask.distributed import Client, LocalCluster

    from hwsim.sweep.groups import _alone_in_process

    assert not _alone_in_process(os.getpid())                 # not on a worker at all
    for processes, threads, alone in ((True, 1, True), (True, 2, False), (False, 1, False)):
        with LocalCluster(n_workers=1, threads_per_worker=threads, processes=processes,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            assert client.submit(_alone_in_process, os.getpid()).result() is alone, (processes, threads)
