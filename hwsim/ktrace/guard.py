"""Bounds on what reading a trace may take: the file's size and, for gzip, what it inflates to.
A small local guard, to be swapped for hwsim/io's bounded reader once that lands."""

from __future__ import annotations

import gzip
from pathlib import Path

from hwsim.errors import ConfigError

MAX_FILE_BYTES = 4 * 2**30          # a profiled decode step of a 100-B model writes ~0.1-1 GB
MAX_INFLATED_BYTES = 16 * 2**30     # a gzip trace is read as a stream; past this it is refused


class _Bounded:
    """A binary file object that raises past `limit` bytes read (gzip bombs, runaway traces)."""

    def __init__(self, raw, limit: int, path: str, key: str):
        self.raw, self.limit, self.read_bytes = raw, limit, 0
        self.path, self.key = path, key

    def read(self, n: int = -1) -> bytes:
        if n == 0:                  # ijson probes read(0) for bytes or text
            return b""
        data = self.raw.read(n if n > 0 else 1 << 20)
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise ConfigError(f"trace inflates past {self.limit / 2**30:.0f} GiB: profile fewer steps "
                              f"(torch.profiler.schedule(active=1))", file=self.path, key=self.key)
        return data

    def close(self) -> None:
        self.raw.close()


def open_bounded(path: Path, key: str) -> _Bounded:
    """`path` (.json or .json.gz, told apart by its first bytes) as a bounded binary stream."""
    from hwsim.io.bounded import Limit, check_regular

    check_regular(path, Limit("kernel trace", MAX_FILE_BYTES), key)     # no device, FIFO or folder
    try:
        size = path.stat().st_size
        raw = open(path, "rb")
    except OSError as e:
        raise ConfigError(f"cannot read the trace: {e.strerror or e}", file=str(path), key=key) from None
    if size > MAX_FILE_BYTES:
        raw.close()
        raise ConfigError(f"trace is {size / 2**30:.1f} GiB, over the {MAX_FILE_BYTES / 2**30:.0f} GiB "
                          f"read; profile one step", file=str(path), key=key)
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        raw = gzip.GzipFile(fileobj=raw)
    return _Bounded(raw, MAX_INFLATED_BYTES, str(path), key)
