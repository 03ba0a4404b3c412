"""A device's copy engine: expert prefetches from HBM into on-chip SRAM, beside the compute
stream. Each expert's copy is timed alone on the memory path (hwsim/engine/timer.py), then
runs as an item of the sharing arbiter: it takes HBM, bus and L2 bandwidth from the kernels
in flight, and they from it."""

from __future__ import annotations

import simpy

from hwsim.engine.sharing import Arbiter
from hwsim.engine.timer import KernelTimer
from hwsim.hw.device import Device
from hwsim.model.kernel import PrefetchLoad


class CopyEngine:
    def __init__(self, env: simpy.Environment, device: Device, arbiter: Arbiter, timer: KernelTimer,
                 engine: int = 0):
        self.env = env
        self.device = device
        self.arbiter = arbiter
        self.timer = timer
        self.engine = engine
        self.landed: dict[tuple[int, int], simpy.Event] = {}   # expert copies in flight or done
        self.bytes = 0.0

    def start(self, load: PrefetchLoad) -> None:
        """Queue the load's expert copies; the stream can wait on each one's `landed` event."""
        for key, *_ in load.loads:
            self.landed[key] = self.env.event()
        self.env.process(self._run(load))

    def _run(self, load: PrefetchLoad):
        env = self.env
        for key, address, nbytes, stack in load.loads:
            effect = self.timer.copy(address, nbytes, stack)
            label = f"L{key[0]}.expert{key[1]}"
            item = self.arbiter.submit(label, effect.duration, self.device.shares(effect, copy_engine=self.engine))
            yield item.done
            self.device.account(effect, 1, self.engine)
            if self.device.recording:
                self.device.record(effect, item.start, env.now, label, self.engine)
            self.bytes += nbytes
            self.landed[key].succeed(env.now)
