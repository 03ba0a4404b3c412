"""A run's results as pure data, below the writers (hwsim/io/) that put them on disk and above
the pass that makes their steps: `RunResult` (hwsim/run.py makes it), and the cyclic collector
paused while a run allocates."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from hwsim.config.scenario import Scenario
from hwsim.engine.records import RecordLog
from hwsim.step import StepResult
from hwsim.summary import RunSummary


@dataclass
class RunResult:
    scenario: Scenario
    steps: list[StepResult]
    records: RecordLog
    run_summary: RunSummary                                   # the typed parts (hwsim/summary.py)
    channel_bytes: list[float] = field(default_factory=list)   # bytes served per HBM channel
    channels_per_stack: int = 1
    sms: int = 1
    stacks: int = 1
    requests: list[dict] = field(default_factory=list)        # serving: one row per request
    iterations: list = field(default_factory=list)            # serving: one Iteration each
    gaps_ms: np.ndarray | list = field(default_factory=list)  # serving: every inter-token gap
    lanes: dict[str, list] = field(default_factory=dict)      # unit lane -> its busy intervals
                                                              # (start, end, label, share), recorded steps
    _summary: tuple | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def summary(self) -> dict:
        """The summary as JSON has it (run_summary.as_dict()): made once per run_summary, so
        a reader that changes it changes this run's copy, as it did when it was the only form."""
        if self._summary is None or self._summary[0] is not self.run_summary:
            self._summary = (self.run_summary, self.run_summary.as_dict())
        return self._summary[1]



@contextmanager
def cyclic_gc_paused():
    """A run allocates millions of short-lived, acyclic objects (kernel records, attribution
    dicts) that reference counting frees at once; CPython's cyclic collector would also rescan
    the growing record list again and again, which cost half the wall time at batch 8. The
    few cycles a run makes (SimPy processes) are left to the next full collection: the run's
    objects go straight to the oldest generation (freeze, unfreeze), where the first collection
    after it would otherwise scan them all as young (2 s after a DeepSeek-V3 batch-64 run)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        gc.enable()
