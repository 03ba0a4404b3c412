"""Run a benchmark's measurement against another revision of hwsim, in the same run: a
temporary `git worktree` of the revision, and this benchmark file run as a subprocess with
PYTHONPATH (and its working folder) pointing at it. Shared by the benchmarks of issue 33."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def worktree(rev: str | None):
    """A checkout of `rev` (removed afterwards); None: this tree."""
    if rev is None:
        yield ROOT
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def measure_in(tree: Path, script: str, args: list[str]) -> dict:
    """`python SCRIPT ARGS` with `tree`'s hwsim; the JSON object it prints last."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, script, *args], cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{script} {' '.join(args)} in {tree} exited {done.returncode}: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
