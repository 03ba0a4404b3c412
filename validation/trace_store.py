"""The repository's measured kernel traces, stored once: one xz tar a folder.

A folder under validation/data that held profiler traces as `NAME.json.gz` files holds them as
`traces.tar.xz` with `NAME.json` inside. Raw JSON compressed together across a folder's traces
is about 1.6x smaller than the same traces gzipped one by one (57 -> 37 MB for the 89 traces),
which keeps the tracked tree small enough to travel to the device machine.

    trace_path(folder / "NAME.json.gz")   # a path hwsim's trace reader opens

gives the file itself where it exists (a fresh capture not yet packed), else the member of the
folder's archive, unpacked once (the whole archive: xz streams are solid, so one member costs
as much as all) into a cache folder named after the archive's content hash, under
$HWSIM_TRACE_CACHE or ~/.cache/hwsim/traces. Unpacking goes to a temporary folder renamed into
place, so concurrent test processes never see half a trace.

    python validation/trace_store.py pack FOLDER     # NAME.json.gz there -> traces.tar.xz
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ARCHIVE = "traces.tar.xz"


def _cache_root() -> Path:
    return Path(os.environ.get("HWSIM_TRACE_CACHE") or Path.home() / ".cache" / "hwsim" / "traces")


def _member_name(path: Path) -> str:
    return path.name[:-3] if path.name.endswith(".json.gz") else path.name


def _unpacked(archive: Path) -> Path:
    """The folder holding the archive's members, unpacking it first if no process has."""
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
    target = _cache_root() / digest
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=target.parent))
    try:
        with tarfile.open(archive, "r:xz") as tar:
            tar.extractall(staging, filter="data")
        try:
            staging.rename(target)
        except OSError:                      # another process got there first: theirs is whole
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def trace_path(path: Path | str) -> Path:
    """A readable path for the trace `path` names (see the module's docstring)."""
    path = Path(path)
    if path.exists():
        return path
    archive = path.parent / ARCHIVE
    if not archive.exists():
        raise FileNotFoundError(f"{path}: no such trace, and no {ARCHIVE} beside it")
    member = _unpacked(archive) / _member_name(path)
    if not member.exists():
        raise FileNotFoundError(f"{path}: not in {archive}")
    return member


def traces_in(folder: Path | str) -> list[str]:
    """The names (`NAME.json.gz`) of the traces a folder holds, loose or archived."""
    folder = Path(folder)
    names = {p.name for p in folder.glob("*.json.gz")}
    if (folder / ARCHIVE).exists():
        with tarfile.open(folder / ARCHIVE, "r:xz") as tar:
            names |= {m.name + ".gz" for m in tar.getmembers() if m.name.endswith(".json")}
    return sorted(names)


def pack(folder: Path) -> Path:
    """Move the folder's NAME.json.gz traces into its traces.tar.xz (raw JSON, reproducible)."""
    loose = sorted(folder.glob("*.json.gz"))
    if (folder / ARCHIVE).exists() or not loose:
        raise SystemExit(f"{folder}: nothing to pack, or {ARCHIVE} is already there")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for gz in loose:
            data = gzip.decompress(gz.read_bytes())
            info = tarfile.TarInfo(_member_name(gz))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    import lzma
    (folder / ARCHIVE).write_bytes(lzma.compress(buffer.getvalue(), preset=9))
    for gz in loose:
        gz.unlink()
    return folder / ARCHIVE


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "pack":
        raise SystemExit(__doc__)
    print(pack(Path(sys.argv[2])))
