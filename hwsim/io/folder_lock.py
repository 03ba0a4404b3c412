"""One writer per output folder: a lock file beside it, `<parent>/.<name>.hwsim-lock`, held
with flock(2) by the process writing the folder, and removed when it is done.

A second `hwsim run --out DIR` while the first still runs is refused (exit 2) instead of both
writing and only the last bundle surviving. flock is released by the kernel when a process
dies, so a killed run never leaves the folder locked; the file itself may stay behind then,
and the next run takes it over.
"""

from __future__ import annotations

import atexit
import fcntl
import os
from pathlib import Path

from hwsim.errors import ConfigError

_held: dict[str, int] = {}        # lock path -> open descriptor, in this process


def lock_path(folder: Path) -> Path:
    folder = Path(folder).absolute()
    return folder.parent / f".{folder.name}.hwsim-lock"


def held(folder: Path) -> bool:
    return str(lock_path(folder)) in _held


def acquire(folder: Path, what: str = "--out") -> None:
    """Take the folder's lock (again: a no-op), or raise ConfigError if another process holds it."""
    path = lock_path(folder)
    if str(path) in _held:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise ConfigError(f"another hwsim process{f' (pid {owner})' if owner else ''} is writing "
                              "to this folder; wait for it or choose another folder",
                              file=str(folder), key=what) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:          # not a file its last holder unlinked as we opened it
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _held[str(path)] = fd


def release(folder: Path) -> None:
    path = str(lock_path(folder))
    fd = _held.pop(path, None)
    if fd is not None:
        try:
            os.unlink(path)        # before closing: whoever opens it next retries on a fresh file
        except FileNotFoundError:
            pass
        os.close(fd)


def release_all() -> None:
    for path in list(_held):
        release(_folder_of(path))


def _folder_of(lock: str) -> Path:
    p = Path(lock)
    return p.parent / p.name[1:-len(".hwsim-lock")]


def _forget_in_child() -> None:
    """A forked child (a bundle's side-by-side writers, hwsim.io.forked) does not hold its
    parent's locks: with the lock's descriptor open in a child that outlives a killed parent,
    the folder would stay locked until that child ended."""
    for fd in _held.values():
        os.close(fd)
    _held.clear()


atexit.register(release_all)
os.register_at_fork(after_in_child=_forget_in_child)
