"""A git revision's files in a temporary folder, for a benchmark to time it beside the working
tree in one run (git archive: no worktree, no branch touched)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def export(rev: str, dest: Path) -> Path:
    """The tree of `rev` under `dest` (made); returns `dest`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev],
                             check=True, capture_output=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def run_timed(argv: list[str], tree: Path) -> tuple[subprocess.CompletedProcess, float, float]:
    """`argv` run in `tree` with it as the hwsim imported: the finished process, its wall
    seconds and the CPU seconds of it and its children (the machine is shared: CPU is the
    steadier figure)."""
    import os
    import resource
    import time
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                          text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
