"""The one way hwsim reads a file it was given: a regular file only, with a size and a line limit.

A scenario naming /dev/zero, /dev/urandom or a FIFO as one of its inputs, or a file of
gigabytes where kilobytes are expected, must end in one error line and exit 2, never in a
process that grows without bound or blocks forever. So every reader goes through here:

    with open_text(path, LIMITS["request trace"], key=...) as fh:   # a counted text stream
    text = read_text(path, LIMITS["yaml"], key=...)                # the whole (small) file
    with open_binary(path, LIMITS["kernel trace"], key=...) as fh: # a counted binary stream
    with open_binary(path, ..., gunzip=True) as fh:                # .gz: the *inflated* bytes counted

The file is checked with os.stat before it is opened (a FIFO or a device is refused without
opening it), then opened with O_NONBLOCK (so a file swapped for a FIFO in between cannot block
the open) and checked again on the open descriptor. Reading past the limit raises ConfigError
as the bytes arrive: a file that grows while it is read (or a /proc file, whose size says 0)
is bounded too.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hwsim.errors import ConfigError


@dataclass(frozen=True)
class Limit:
    what: str              # names the file in messages: "scenario", "request trace", ...
    max_bytes: int
    max_lines: int | None = None     # text only; None: bounded by max_bytes alone
    max_inflated_bytes: int | None = None    # gunzip: what the file may inflate to (None: max_bytes)


# One entry per kind of file hwsim reads. Each bound is far above any real file of its kind
# and far below what would exhaust a laptop's memory.
LIMITS = {
    # scenarios, profiles, models, sweep specs: a few KiB each
    "yaml": Limit("YAML file", 4 * 2**20, 100_000),
    # production request traces are streamed a line at a time (hwsim.serving.traces) and only the
    # window replayed is kept: BurstGPT's 4 months are ~200 MB, 10 M rows
    "request trace": Limit("request trace", 8 * 2**30, 200_000_000),
    # a routing trace is held whole (one list per token and layer): 4 M rows is ~1 GB of Python lists
    "routing trace": Limit("routing trace", 256 * 2**20, 4_000_000),
    # validation datasets: at most 10,000 measured cases (hwsim.validate.MAX_ROWS)
    "validation CSV": Limit("validation CSV", 16 * 2**20, 100_000),
    # a bundle's manifest.json: the resolved config, profile, model and file list, < 1 MB
    "manifest": Limit("manifest.json", 64 * 2**20, 2_000_000),
    # torch profiler traces, streamed (hwsim.ktrace.reader): a profiled decode step of a 100-B
    # model writes ~0.1-1 GB; a .gz may inflate to 16 GB
    "kernel trace": Limit("kernel trace", 4 * 2**30, max_inflated_bytes=16 * 2**30),
}


@dataclass(frozen=True)
class JsonShape:
    """What a JSON document may hold, checked on its bytes as they stream in, before a parser
    sees them: a parser's memory grows ~8 KB a level of nesting (10^6 levels: 7.9 GB), and
    yajl (ijson's C backend) re-scans a string that spans its reads, so a 1 GB string in a 1 MB
    .gz took minutes (a 10 MB one 2.2 s, a 1 MB one 0.04 s)."""
    max_depth: int = 64              # Kineto's traces nest 6 deep, a manifest ~10
    max_string: int = 2**20          # a kernel's mangled C++ name is a few KB


JSON_SHAPE = JsonShape()


def _refuse(path: Path, limit: Limit, key: str | None, message: str, line: int | None = None) -> ConfigError:
    return ConfigError(f"{limit.what}: {message}", file=str(path), line=line, key=key)


def check_regular(path: Path, limit: Limit, key: str | None = None) -> os.stat_result:
    """os.stat of `path`, which must exist and be a regular file no larger than the limit."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _refuse(path, limit, key, "file not found") from None
    except OSError as exc:
        raise _refuse(path, limit, key, f"cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(path, limit, key, "is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, limit, key, "is not a regular file (a device, FIFO or socket); "
                                        "hwsim reads only regular files")
    if st.st_size > limit.max_bytes:
        raise _refuse(path, limit, key, f"the file is {st.st_size:,} bytes long "
                                        f"(at most {limit.max_bytes:,})")
    return st


def _open_fd(path: Path, limit: Limit, key: str | None) -> int:
    check_regular(path, limit, key)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _refuse(path, limit, key, f"cannot read it ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):          # replaced by something else since the stat
        os.close(fd)
        raise _refuse(path, limit, key, "is not a regular file; hwsim reads only regular files")
    return fd


class _CountedRaw(io.RawIOBase):
    """A raw binary stream that refuses to deliver more than `limit.max_bytes` bytes."""

    def __init__(self, raw, path: Path, limit: Limit, key: str | None, inflated: bool = False):
        self._raw, self._path, self._limit, self._key = raw, path, limit, key
        self._inflated = inflated           # counting what a gzip file inflates to
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer)
        self.count += n or 0
        if self.count > self._limit.max_bytes:
            n = f"more than {self._limit.max_bytes:,} bytes"
            raise _refuse(self._path, self._limit, self._key,
                          f"{n} inflated: the file inflates past the limit for this kind of file"
                          if self._inflated else f"{n} (the limit for this kind of file)")
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


class _JsonShapeRaw(io.RawIOBase):
    """The bytes of a JSON document, refused (ConfigError) once they nest deeper or hold a
    longer string than `shape` allows. Escapes are masked in place (a backslash pair, then an
    escaped quote, each as two '_'), so every quote left opens or closes a string; the depth is
    a running sum over the brackets outside them. A few C-speed passes over each read (bytes
    methods and numpy), no Python work a byte."""

    _STRUCTURE = bytes.maketrans(b"{}", b"[]")
    _NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')

    def __init__(self, raw, path: Path, limit: Limit, key: str | None, shape: JsonShape):
        self._raw, self._path, self._limit, self._key, self._shape = raw, path, limit, key, shape
        self._in_string, self._escaped, self._string, self._depth, self._offset = False, False, 0, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer)
        if n:
            self._scan(bytes(memoryview(buffer)[:n]))
            self._offset += n
        return n

    def _scan(self, data: bytes) -> None:
        if self._escaped:                 # the last read ended on a backslash: this byte is its
            data = b"_" + data[1:]        # escaped character
        masked = data.replace(b"\\\\", b"__").replace(b'\\"', b"__")
        self._escaped = masked.endswith(b"\\")
        quotes, was_in = masked.count(b'"'), self._in_string
        if was_in:                        # the string open at the last read goes on to the first quote
            first = masked.find(b'"')
            self._string += len(masked) if first < 0 else first
            self._check_string(self._string)
        if len(masked) > self._shape.max_string and quotes > 1:     # a read long enough to hold one
            self._check_string(max(map(len, masked.split(b'"')[2 if was_in else 1:quotes:2]), default=0))
        self._in_string ^= quotes % 2 == 1
        if quotes:
            self._string = len(masked) - masked.rfind(b'"') - 1 if self._in_string else 0
        # quotes and brackets only; two quotes side by side (a string without brackets, or one
        # string's end and the next one's start) hide no bracket outside a string: dropped
        marks = (b'"' if was_in else b"") + masked.translate(self._STRUCTURE, self._NOT_STRUCTURE)
        self._nest(b"".join(marks.replace(b'""', b"").split(b'"')[0::2]))

    def _check_string(self, length: int) -> None:
        if length > self._shape.max_string:
            raise _refuse(self._path, self._limit, self._key, f"holds a string longer than "
                          f"{self._shape.max_string:,} bytes (near byte {self._offset:,})")

    def _nest(self, brackets: bytes) -> None:
        """Follow the nesting through this read's brackets (those outside strings; '{' as '[')."""
        if not brackets:
            return
        import numpy as np      # hwsim's runs import it anyway; a manifest's first read pays for it

        depth = self._depth + np.cumsum(92 - np.frombuffer(brackets, np.uint8).astype(np.int64))  # '[' 91: +1
        if int(depth.max()) > self._shape.max_depth:
            raise _refuse(self._path, self._limit, self._key, f"nests deeper than {self._shape.max_depth} "
                          f"levels (near byte {self._offset:,})")
        self._depth = max(0, int(depth[-1]))

    def close(self) -> None:
        self._raw.close()
        super().close()


class _CountedLines:
    """A text stream (iterable, readline, read) that refuses more than `limit.max_lines` lines."""

    def __init__(self, text, path: Path, limit: Limit, key: str | None):
        self._text, self._path, self._limit, self._key = text, path, limit, key
        self.lines = 0

    def _count(self, chunk: str) -> str:
        self.lines += chunk.count("\n")
        if self._limit.max_lines is not None and self.lines > self._limit.max_lines:
            raise _refuse(self._path, self._limit, self._key,
                          f"more than {self._limit.max_lines:,} lines (the limit for this kind of file)",
                          line=self._limit.max_lines + 1)
        return chunk

    def readline(self, size: int = -1) -> str:
        return self._count(self._text.readline(size))

    def read(self, size: int = -1) -> str:
        return self._count(self._text.read(size))

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def close(self) -> None:
        self._text.close()


class _GunzipRaw(io.RawIOBase):
    """The inflated bytes of a gzip stream, read through a counted raw stream."""

    def __init__(self, compressed, path: Path, limit: Limit, key: str | None):
        self._gz = gzip.GzipFile(fileobj=compressed, mode="rb")
        self._path, self._limit, self._key = path, limit, key

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            return self._gz.readinto(buffer)
        except EOFError as exc:             # the stream ends before its end-of-stream marker
            raise _refuse(self._path, self._limit, self._key, f"the gzip stream is truncated ({exc})") from None
        except (OSError, zlib.error) as exc:
            raise _refuse(self._path, self._limit, self._key, f"not a valid gzip file ({exc})") from None

    def close(self) -> None:
        self._gz.close()
        super().close()


@contextmanager
def open_binary(path: str | Path, limit: Limit, key: str | None = None, gunzip: bool = False,
                shape: JsonShape | None = None):
    """A buffered binary stream of a regular file that raises ConfigError past limit.max_bytes.
    With `gunzip`, the stream is the file inflated, and the inflated bytes are what is counted,
    up to limit.max_inflated_bytes (a 1 MB file that inflates to 100 GB is refused there).
    With `shape`, the bytes are a JSON document, refused past its depth and string length."""
    path = Path(path)
    fd = _open_fd(path, limit, key)
    raw = open(fd, "rb", buffering=0)
    if gunzip:
        unbounded = Limit(limit.what, 2**63)          # the compressed size is bounded by the stat
        inflated = Limit(limit.what, limit.max_inflated_bytes or limit.max_bytes)
        stream = _CountedRaw(_GunzipRaw(io.BufferedReader(raw), path, unbounded, key), path, inflated, key,
                             inflated=True)
    else:
        stream = _CountedRaw(raw, path, limit, key)
    if shape is not None:
        stream = _JsonShapeRaw(stream, path, limit, key, shape)
    with io.BufferedReader(stream, buffer_size=1 << 16) as fh:
        yield fh


@contextmanager
def open_text(path: str | Path, limit: Limit, key: str | None = None, encoding: str = "utf-8",
              newline: str | None = None):
    """A text stream of a regular file, bounded in bytes and in lines. Bytes that are not
    `encoding` raise ConfigError (not UnicodeDecodeError)."""
    path = Path(path)
    with open_binary(path, limit, key) as binary:
        text = io.TextIOWrapper(binary, encoding=encoding, newline=newline)
        try:
            yield _CountedLines(text, path, limit, key)
        except UnicodeDecodeError as exc:
            raise _refuse(path, limit, key, f"not {encoding.upper().replace('-SIG', '')} text "
                                            f"({exc.reason})") from None
        finally:
            text.detach()


def read_bytes(path: str | Path, limit: Limit, key: str | None = None, shape: JsonShape | None = None) -> bytes:
    with open_binary(path, limit, key, shape=shape) as fh:
        return fh.read()


def read_json(path: str | Path, limit: Limit, key: str | None = None):
    """A small JSON document (a manifest), its depth and strings bounded (JSON_SHAPE): ValueError
    if it is not JSON, ConfigError if it is not a readable file of that shape."""
    import json

    return json.loads(read_text(path, limit, key, shape=JSON_SHAPE))


def read_text(path: str | Path, limit: Limit, key: str | None = None, encoding: str = "utf-8",
              shape: JsonShape | None = None) -> str:
    """The whole of a small text file. A NUL byte is refused: no text format hwsim reads has one,
    and it is the mark of a binary file given by mistake."""
    path = Path(path)
    data = read_bytes(path, limit, key, shape)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise _refuse(path, limit, key, f"not {encoding.upper()} text ({exc.reason})", line=line) from None
    if "\0" in text:
        raise _refuse(path, limit, key, "holds a NUL byte (a binary file?)", line=text[:text.index("\0")].count("\n") + 1)
    lines = text.count("\n")
    if limit.max_lines is not None and lines > limit.max_lines:
        raise _refuse(path, limit, key, f"more than {limit.max_lines:,} lines (the limit for this kind of file)")
    return text
