"""Where the measuring process's threads ran, sampled while a run serves (issue 43: the eager
engine's steps switch for seconds at a time between two speeds, ~1.5-1.8x apart, whatever the
batch: validation/hf_serving_steps.py `modes`). Linux only (/proc); elsewhere it records nothing.

Each sample reads /proc/self/task/<tid>/stat of every thread: the CPU it last ran on (field 39)
and its user + system time (fields 14, 15, in clock ticks). Aligned with the steps, they tell
whether a slow stretch is the engine thread descheduled (its CPU time per wall second below 1),
moved to another CPU (a new `cpu`: another core, NUMA node or SMT sibling), or running at full
share on the same CPU yet slower (the core's own speed).
"""

from __future__ import annotations

import os
from pathlib import Path

TASKS = Path("/proc/self/task")


def parse_stat(text: str) -> tuple[str, int, int]:
    """(thread name, CPU last run on, user + system ticks) of one /proc/<pid>/task/<tid>/stat line;
    the name is in parentheses and may hold spaces, so fields are counted after its closing one."""
    name = text[text.index("(") + 1:text.rindex(")")]
    rest = text[text.rindex(")") + 2:].split()        # rest[0] is field 3 (state)
    return name, int(rest[36]), int(rest[11]) + int(rest[12])


class ThreadSampler:
    """Samples the process's threads at the times the caller gives (seconds from its run start)."""

    def __init__(self, tasks: Path = TASKS):
        self.tasks = tasks
        self.rows: list[dict] = []
        self.ticks_per_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def sample(self, t: float) -> None:
        if not self.tasks.is_dir():
            return
        for task in self.tasks.iterdir():
            try:
                name, cpu, ticks = parse_stat((task / "stat").read_text())
            except (OSError, ValueError, IndexError):    # a thread that ended between listing and reading
                continue
            self.rows.append({"t": round(t, 4), "tid": int(task.name), "name": name, "cpu": cpu,
                              "cpu_s": round(ticks / self.ticks_per_s, 3)})
