"""What a stream reports: one record per kernel (opt-in, the first steps of a run) and the
step's totals (always)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hwsim.engine.host import HostTotals
from hwsim.metrics import Component
from hwsim.model.kernel import ExpertBlock, Kernel


@dataclass(slots=True)
class KernelRecord:
    """What happened to one kernel: its timing and where its time went (critical path).
    Its sizes are read off the kernel it ran (one object a shape, shared across steps), its
    name and layer off the routed expert it ran for (hwsim.model.kernel.ExpertBlock), if any."""

    step: int
    index: int
    kernel: Kernel
    t_ready: float          # previous kernel done (stream order)
    t_start: float          # dispatched and running on the device
    t_end: float
    waves: int = 0
    parts: dict[Component, float] = field(default_factory=dict)   # the kernel's own time; replays
                                                                   # share one dict (read-only)
    launch_s: float = 0.0    # waiting to be dispatched after the previous kernel ended
    wait_s: float = 0.0      # waiting on an expert prefetch before that
    shared: bool = False     # ran beside items of other streams (its time stretched by sharing)
    owner: ExpertBlock | None = None   # the routed expert it ran for (which names it), if any

    @property
    def attribution(self) -> dict[Component, float]:
        """Where the time from t_ready to t_end went (critical path)."""
        out = dict(self.parts)
        out[Component.LAUNCH_OVERHEAD] = out.get(Component.LAUNCH_OVERHEAD, 0.0) + self.launch_s
        if self.wait_s:
            out[Component.EXPERT_LOAD_WAIT] = out.get(Component.EXPERT_LOAD_WAIT, 0.0) + self.wait_s
        return out

    @property
    def name(self) -> str:
        return self.owner.name_of(self.kernel) if self.owner else self.kernel.name

    @property
    def layer(self) -> int:
        return self.owner.layer if self.owner else self.kernel.layer

    @property
    def tiles(self) -> int:
        return self.kernel.tiles

    @property
    def data(self) -> Component:
        return self.kernel.data

    @property
    def hbm_read_bytes(self) -> float:
        return self.kernel.tiles * self.kernel.hbm_read

    @property
    def hbm_write_bytes(self) -> float:
        return self.kernel.tiles * self.kernel.hbm_write

    @property
    def l2_bytes(self) -> float:
        return self.kernel.tiles * (self.kernel.l2_read + self.kernel.l2_write)

    @property
    def decoded(self) -> float:
        """Elements expanded by a native decoder."""
        return self.kernel.tiles * self.kernel.decoder_elements


class RecordLog:
    """A run's kernel records as streams write them: a tuple a kernel, KernelRecord's fields in
    order (a KernelRecord costs five times a tuple to make, and a DeepSeek-V3 batch-64 run
    keeps a million; the bundle's table reads the tuples column by column). Read back, as a
    sequence, it gives KernelRecords, made on access."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[tuple] | None = None):
        self.rows: list[tuple] = rows if rows is not None else []

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return (KernelRecord(*row) for row in self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [KernelRecord(*row) for row in self.rows[i]]
        return KernelRecord(*self.rows[i])

    def renumber(self, first: int) -> None:
        """Index the records from `first` on 0, 1, ... (a pass whose streams interleave)."""
        rows = self.rows
        rows[first:] = [(row[0], i, *row[2:]) for i, row in enumerate(rows[first:])]


@dataclass
class StreamTotals:
    """Where a stream's time went, the HBM bytes its kernels moved (by each kernel's data
    component), and how many kernels it ran and replayed."""

    parts: dict[Component, float] = field(default_factory=dict)
    moved: dict[Component, float] = field(default_factory=dict)
    kernels: int = 0
    replayed: int = 0
    host: HostTotals = field(default_factory=HostTotals)   # the host's side of the pass

    def add(self, parts: dict[Component, float], data: Component, hbm_bytes: float, count: int = 1) -> None:
        for comp, secs in parts.items():
            self.parts[comp] = self.parts.get(comp, 0.0) + count * secs
        self.moved[data] = self.moved.get(data, 0.0) + count * hbm_bytes

    def add_seconds(self, component: Component, secs: float) -> None:
        self.parts[component] = self.parts.get(component, 0.0) + secs
