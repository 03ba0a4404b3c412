"""The SimPy environment of a simulation, counting the events it processes (`sim.events`)."""

from __future__ import annotations

import simpy


class CountingEnvironment(simpy.Environment):
    def __init__(self, initial_time: float = 0.0):
        super().__init__(initial_time)
        self.processed = 0

    def step(self) -> None:
        super().step()          # raises EmptySchedule when nothing is left: not an event
        self.processed += 1
