"""A process that imports matplotlib while the run simulates, then draws the bundle's figures.

Importing matplotlib costs about 0.6 s of CPU, and drawing the figures about 1 s more;
neither needs the simulation, only its results. So `hwsim run --plots` forks this helper
first thing: it imports the plotting modules while the parent imports the engine and
simulates, then receives each figure as (function, arguments) pickled, and draws them side by
side (hwsim.io.forked) into the bundle's staging folder while the parent writes the tables.
The figures are drawn by the same functions from the same values, so they are the same files.

`hwsim run` (through the console script, hwsim/launch.py) forks it earlier still, before the
command line is parsed and before numpy, pydantic and the engine are imported: its imports
(matplotlib, about 0.4 s) are the longest path of the default run, and start about 0.2 s
sooner (issue 33, item 5). The command takes that helper (`take_early`) or, where there is
none, forks its own.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import threading

from hwsim.io.forked import failure, idle_cpus, report

Figure = tuple[str, float, str, tuple]      # (file name, relative cost, "module:function", args)

_MODULES = ("hwsim.plots.breakdown", "hwsim.plots.channels", "hwsim.plots.gantt", "hwsim.plots.serving")
from hwsim.plots.loading import BREAKDOWN  # noqa: E402 - the default run's one figure
_early: Plotter | None = None                # forked by hwsim.launch, not yet taken


class Plotter:
    def __init__(self, pid: int, to_child: int, from_child: int, modules: tuple[str, ...] = _MODULES):
        self.pid, self.to_child, self.from_child = pid, to_child, from_child
        self.modules = modules

    @classmethod
    def start(cls, modules: tuple[str, ...] = _MODULES) -> Plotter | None:
        """The helper, forked now, importing the plotting `modules` (those of the figures it
        will be sent); None where fork is not available or no CPU is idle (it repeats imports
        the parent makes too, a loss when it cannot run beside it)."""
        if not hasattr(os, "fork") or idle_cpus() < 0.5 or threading.active_count() > 1:
            return None
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(down_w)
            os.close(up_r)
            _serve(down_r, up_w, modules)   # never returns
        os.close(down_r)
        os.close(up_w)
        return cls(pid, down_w, up_r, modules)

    @classmethod
    def start_early(cls, modules: tuple[str, ...]) -> None:
        """Fork the helper now, for the command about to be parsed to take (hwsim.launch)."""
        global _early
        _early = cls.start(modules)

    def draw(self, figures: list[Figure]) -> None:
        """Send the figures to draw, from a thread: the pipe takes 64 KB at a time and the
        helper reads only once its imports are done, while this process writes the tables."""
        data = pickle.dumps(figures, protocol=pickle.HIGHEST_PROTOCOL)
        fd, self.to_child = self.to_child, -1

        def send():
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(struct.pack("<Q", len(data)))
                    fh.write(data)
            except OSError:
                pass                        # the helper died: wait() reports how
        self.sender = threading.Thread(target=send, daemon=True)
        self.sender.start()

    def wait(self) -> None:
        """Return when the figures are written; raise a figure's exception here if one failed."""
        self.sender.join()
        with os.fdopen(self.from_child, "rb") as fh:
            data = fh.read()
        self.from_child = -1
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if status != 0:
            raise failure(data, status)

    def close(self) -> None:
        """Stop the helper if it was never given figures (a run that failed, or wrote none)."""
        for fd in (self.to_child, self.from_child):
            if fd >= 0:
                os.close(fd)
        self.to_child = self.from_child = -1
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)    # it may still be importing: no need to wait
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0


def take_early(modules: tuple[str, ...]) -> Plotter | None:
    """The helper hwsim.launch forked, if it imports all of `modules`; one that does not is
    stopped. None if there was none (a command run otherwise than by the console script)."""
    global _early
    early, _early = _early, None
    if early is not None and not set(modules) <= set(early.modules):
        early.close()
        return None
    return early


def discard_early() -> None:
    """Stop the early helper if no command took it (a usage error, a run without figures)."""
    global _early
    early, _early = _early, None
    if early is not None:
        early.close()


def _serve(down: int, up: int, modules: tuple[str, ...] = _MODULES) -> None:
    status = 0
    try:
        # never hold the parent's stdout or stderr open (a reader would wait for this process)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        from hwsim.plots.loading import import_for_drawing
        import_for_drawing(modules)          # matplotlib without its help text (hwsim/plots/loading.py)
        with os.fdopen(down, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:                    # the parent gave up: nothing to draw
                return
            figures = pickle.loads(fh.read(struct.unpack("<Q", head)[0]))
        from hwsim.io.forked import call, write_all
        write_all([(name, cost, call(target, args)) for name, cost, target, args in figures])
    except BaseException as exc:                 # noqa: BLE001 - reported to the parent
        report(up, exc)
        status = 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        os._exit(status)

