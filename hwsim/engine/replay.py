"""A cache around the timer: a kernel timed once per resource demand, then replayed.

Within a step every layer issues the same kernels on the same shapes, and a kernel timed
alone depends only on what it asks of the units (hwsim/engine/timer.py). The key is every
field of the Kernel that is not marked `timing=False` in its dataclass metadata (its name,
its layer, the cached key itself), with the address reduced to where it starts in the HBM
channel interleave. A field added to Kernel is therefore part of the key unless its author
says it cannot change timing: a new timing field can never be replayed stale.

The devices of one cluster are one chip, and a kernel alone times the same on any of them, so
their streams' caches share one book of effects (hwsim/build.py): a kernel is timed once for all
the GPUs of a run, not once per GPU (issue 33: a 64-GPU pass timed each new kernel 64 times).
Each stream keeps its own index into the book, so that what it counts as replayed (a kernel it
has met before) is what it was when each had its own. An Effect holds nothing of a device: what
a device derives from it (its shares, its lanes) the device keeps (hwsim/hw/device.py).
"""

from __future__ import annotations

import itertools

from hwsim.hw.effect import Effect
from hwsim.engine.timer import KernelTimer
from hwsim.model.kernel import Kernel, timing_of


# A replay key is an int, one per (channel phase, TimingKey) in the process: kernels that time
# alike share it, and a dict lookup hashes an int in C (an object's own __hash__ is a Python
# call per kernel).
_next_key = itertools.count(1)
REPLAY_LIMIT = 100_000      # effects a cache, and a cluster's book, keep at once: a long serving run
                            # meets a new attention shape each context length; past it, a kernel
                            # met again is timed again (the same Effect's numbers)


class ReplayCache:
    def __init__(self, timer: KernelTimer, book: dict[int, Effect] | None = None):
        """`book`: effects timed by the timers of identical devices (same chip, same fidelity),
        shared with their caches; none: this cache's own."""
        self.timer = timer
        hbm = timer.path.hbm
        self._interleave, self._channels = hbm.interleave, hbm.channels
        self.effects: dict[int, Effect] = {}          # the kernels this cache has met
        self.book = {} if book is None else book
        self.misses = 0          # kernels timed (replays are counted by the streams)

    def key(self, k: Kernel) -> int:
        if k.replay_key is None:
            timing = k.timing or timing_of(k)   # copies of a template mostly carry it already
            granule, offset = divmod(int(k.address), self._interleave)
            phase = (granule % self._channels, offset)
            key = timing.replay_keys.get(phase)
            if key is None:
                key = timing.replay_keys[phase] = next(_next_key)
            k.replay_key = key
        return k.replay_key

    def effect(self, k: Kernel) -> tuple[Effect, bool]:
        """(the kernel's Effect alone, whether it was replayed: met by this cache before)."""
        key = k.replay_key or self.key(k)
        effect = self.effects.get(key)
        if effect is not None:
            return effect, True
        effect = self.book.get(key)
        if effect is None:                   # no identical device has timed it either
            self.misses += 1
            if len(self.book) >= REPLAY_LIMIT:
                self.book.clear()
            effect = self.book[key] = self.timer.at_once(k)
        if len(self.effects) >= REPLAY_LIMIT:
            self.effects.clear()
        self.effects[key] = effect
        return effect, False
