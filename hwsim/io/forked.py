"""Write a bundle's files side by side in forked children (and map independent work, such
as validate's rows, over them: map_side_by_side).

A bundle's files are independent of one another, and most of their cost is CPU in one
process: matplotlib laying out and rendering each figure, pyarrow encoding the tables. Forked
after the simulation, children see the run's results without copying or pickling them, and
each writes its share of the files into the staging folder; the parent writes the rest and
waits for them, so the bundle is complete (and hashed) exactly as before. Where fork is not
available, or one CPU is all there is, the files are written one after another.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import threading
import traceback
from typing import Callable

Job = tuple[str, float, Callable[[], None]]      # (file name, relative cost, write it)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                          # not Linux
        return os.cpu_count() or 1


def idle_cpus() -> float:
    """CPUs not busy over the last minute (load average); processes side by side pay only on
    idle CPUs, and on a busy machine they add their forks and repeated work to its load. A
    CPU counts once it is idle half the time (hwsim runs back to back hold the average near 1
    on their own, with the other CPU free)."""
    try:
        return _cpus() - os.getloadavg()[0]
    except (AttributeError, OSError):               # no load average here: assume one is idle
        return 1.0


def map_side_by_side(fn: Callable, items: list, costs: list[float], workers: int | None = None) -> list:
    """[fn(item) for item in items], over this process and up to `workers` - 1 forked children
    (default: one per CPU, at most 4), each sending its results back pickled. The items wait
    in a queue, costliest first, and each process takes the next one as it finishes the last:
    costs are estimates (a validate row's was off by 2.5x), so dealing them out beforehand left
    one process a second behind the other. For independent work with results worth more than
    their pickling (a validate row: seconds of simulation, a small dict). A child's exception
    is raised here."""
    n = min(len(items), workers or min(_cpus(), 4))
    # fork only a single-threaded process: a child of a threaded one (a Dask worker running
    # a sweep point) could inherit a lock another thread held, and hang on it
    if n < 2 or not hasattr(os, "fork") or threading.active_count() > 1:
        return [fn(x) for x in items]
    queue = _queue(sorted(range(len(items)), key=lambda i: -costs[i]))
    results: list = [None] * len(items)
    children: dict[int, int] = {}                   # pid -> read end of its results pipe
    try:
        for _ in range(n - 1):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _map_child(fn, items, queue, w)
            os.close(w)
            children[pid] = r
        for i in _taken(queue):
            results[i] = fn(items[i])
        for pid, r in list(children.items()):
            with os.fdopen(r, "rb") as fh:
                data = fh.read()
            _, status = os.waitpid(pid, 0)
            del children[pid]
            if status != 0:
                raise failure(data, status)
            for i, value in pickle.loads(data):
                results[i] = value
        return results
    finally:                                        # interrupted or failed: stop the rest
        os.close(queue)
        _stop(children)


_INDEX = struct.Struct("<I")


def _queue(order: list[int]) -> int:
    """A pipe holding the indices in `order`, its write end closed: processes that share its
    read end take one index per read (the kernel serialises reads; all of it is written
    before any read, so each read of an index's 4 bytes gets all 4), and read nothing once
    it is empty. A pipe holds 64 KiB unread: 16,384 items (validate takes at most 10,000 rows)."""
    r, w = os.pipe()
    try:
        data = b"".join(map(_INDEX.pack, order))
        assert os.write(w, data) == len(data)
    finally:
        os.close(w)
    return r


def _taken(queue: int):
    """The indices this process takes from the queue, one at a time, until it is empty."""
    while len(data := os.read(queue, _INDEX.size)) == _INDEX.size:
        yield _INDEX.unpack(data)[0]


def _map_child(fn: Callable, items: list, queue: int, w: int) -> None:
    status = 1
    try:
        try:
            data = pickle.dumps([(i, fn(items[i])) for i in _taken(queue)], protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:                # noqa: BLE001 - reported to the parent
            status = 130 if isinstance(exc, KeyboardInterrupt) else 1
            report(w, exc)
        else:
            with os.fdopen(w, "wb") as fh:
                fh.write(data)
            status = 0
    finally:
        os._exit(status)


def _stop(children: dict[int, int]) -> None:
    """End forked children still running (the parent was interrupted, or another one failed)."""
    for pid, r in children.items():
        os.close(r)
        try:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def write_all(jobs: list[Job], workers: int | None = None) -> None:
    """Run every job's writer; in up to `workers` processes (default: 1 + the idle CPUs,
    rounded, at most 4), or in this one where the costliest job costs as much as the rest
    together: side by side could not end sooner, and a child forked from a run's large heap
    copies every page it touches (a DeepSeek-V3 batch-64 bundle: 3.9 s forked, 3.5 s here).
    A writer's exception is raised here, wherever it ran."""
    costs = sorted((cost for _, cost, _ in jobs), reverse=True)
    if costs and costs[0] >= sum(costs[1:]):
        workers = 1
    n = min(len(jobs), workers or min(1 + round(idle_cpus()), 4))
    map_side_by_side(lambda job: job[2](), jobs, [cost for _, cost, _ in jobs], n)


def report(w: int, exc: BaseException) -> None:
    """Send a child's exception to the parent, which raises it as its own (so Ctrl-C is still
    an interrupt, and a full disk still an OSError, to the command's exit status)."""
    try:
        data = pickle.dumps(exc)
    except Exception:                               # noqa: BLE001 - not picklable: its text
        data = pickle.dumps(RuntimeError(traceback.format_exception_only(type(exc), exc)[-1].strip()))
    os.write(w, data)


def failure(data: bytes, status: int) -> BaseException:
    """The exception a child reported (or one naming its exit status)."""
    try:
        exc = pickle.loads(data)
        if isinstance(exc, BaseException):
            return exc
    except Exception:                               # noqa: BLE001 - a torn report
        pass
    # no report: the child was killed (the kernel's OOM killer, a user's kill) or exited early;
    # that is the machine's doing, not a bug, so an OSError (one line, exit 2)
    if os.WIFSIGNALED(status):
        how = f"was killed by signal {os.WTERMSIG(status)} (out of memory, or a kill)"
    else:
        how = f"exited with status {os.waitstatus_to_exitcode(status)}"
    return OSError(f"a helper process writing the bundle {how}; the earlier files are left as they were")


def call(target: str, args: tuple) -> Callable[[], None]:
    """A job's writer named as "module:function" (picklable) with its arguments."""
    import importlib

    module, function = target.split(":")
    return lambda: getattr(importlib.import_module(module), function)(*args)
