"""Provenance of a run: version, git SHA, and where the profile's numbers came from."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

from hwsim import __version__


def git_sha() -> str | None:
    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance() -> dict:
    return {"hwsim_version": __version__, "git_sha": git_sha(), "python": platform.python_version()}
