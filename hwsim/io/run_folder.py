"""Where `hwsim run` puts a bundle when no --out is given, and the `latest` link to it.

Each variant of a scenario gets its own folder, so that `--set hardware=b200` never replaces
the bundle of the run before (issue 28): reports/<scenario name>, and with overrides
reports/<scenario name>-<8 hex digits>, a hash of what the overrides set (the same overrides,
in any order, give the same folder; the manifest's `overrides` says what they were).
reports/latest is a relative symlink to the last such bundle.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from hwsim.errors import ConfigError

REPORTS = Path("reports")
LATEST = "latest"


def overrides_hash(sets: list[str]) -> str | None:
    """8 hex digits of what `sets` (--set key=value) set, last one per key winning; None when
    they set nothing but the name (which names the folder itself)."""
    from hwsim.config.load import parse_set

    values = {".".join(key): value for key, value in map(parse_set, sets)}
    values.pop("name", None)
    if not values:
        return None
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def default_folder(name: str, sets: list[str]) -> Path:
    if name == LATEST:
        raise ConfigError(f"reports/{LATEST} is the link to the last run; give the scenario another "
                          "name or the run an --out", key="name")
    digest = overrides_hash(sets)
    return REPORTS / (f"{name}-{digest}" if digest else name)


def point_latest(bundle: Path) -> None:
    """Make <bundle's folder>/latest link to `bundle`, swapped in atomically. A `latest` that
    is not a link (a folder of someone's own) is left alone, as is a filesystem without links."""
    link = bundle.parent / LATEST
    if link.exists() and not link.is_symlink():
        return
    tmp = bundle.parent / f".{LATEST}.{os.getpid()}.tmp"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(bundle.name, target_is_directory=True)
        os.replace(tmp, link)           # replaces the link itself, never what it points to
    except OSError:
        tmp.unlink(missing_ok=True)
