"""Which activations a kernel still finds in L2, and which it must fetch back from HBM.

The L2 is modelled as an LRU cache of the activations' bytes and of everything streamed
through it since: a kernel's weights or KV read from HBM, its writes. An activation read
after more than the L2's capacity has passed through since it was last written or read is
gone, and the kernel reads it from HBM instead (its round trips then wait on HBM latency).
This is what makes the per-expert element-wise kernels slower inside a step than alone:
each expert's weights (235 MB for Mixtral-8x7B) sweep the L2 between the token gather of
one expert and the next, and between a GEMM and the SiLU that reads its output.

A kernel's own output counts as written before its own stream: on the H200 the output of a
GEMM that streams 235 MB of weights is read back at HBM cost even when every block writes
its only tile at the end (calibration/data/h200_after_gemm_cause.jsonl: SiLU on it 4.0 us,
on an evicted tensor 3.4 us, on a resident one 2.2 us at 4 rows; after a GEMM whose 15 MB
of weights stay in L2, 2.5 us).
"""

from __future__ import annotations

import dataclasses

from hwsim.model.kernel import Kernel, StreamItem


class L2Residency:
    def __init__(self, capacity_bytes: float, spill_address: int):
        self.capacity = capacity_bytes       # L2 bytes activations may use (less any pinned SRAM)
        self.spill_address = spill_address   # where an evicted activation is re-read from
        self.clock = 0.0                     # bytes through the L2 so far
        self.last_use: dict[str, float] = {}
        self._variants: dict[tuple[int, int], tuple[Kernel, Kernel]] = {}

    def place(self, items: list[StreamItem]) -> list[StreamItem]:
        """The stream with each kernel that reads evicted activations replaced by a variant
        that reads them from HBM; the L2's state carries over to the next call (next step)."""
        out: list[StreamItem] = []
        for item in items:
            if isinstance(item, Kernel):
                item = self._run(item)
            out.append(item)
        return out

    def _run(self, k: Kernel) -> Kernel:
        clock, last_use = self.clock, self.last_use     # locals: this runs for every kernel of every step
        evicted = 0
        for name in k.reads:
            last = last_use.get(name)
            if last is None or clock - last > self.capacity:
                evicted += 1
            last_use[name] = clock
        for name in k.writes:
            last_use[name] = clock
        self.clock = clock + k.tiles * (k.hbm_read + k.hbm_write + k.l2_write)
        return self._spilled(k, evicted) if evicted else k

    def _spilled(self, k: Kernel, evicted: int) -> Kernel:
        key = (id(k), evicted)
        hit = self._variants.get(key)
        if hit is None or hit[0] is not k:
            moved = k.l2_read * evicted / len(k.reads)
            variant = dataclasses.replace(k, l2_read=k.l2_read - moved, hbm_read=k.hbm_read + moved,
                                          address=k.address or self.spill_address,
                                          miss_trips=k.input_trips if k.miss_trips < 0 and not k.hbm_read
                                          else k.miss_trips, replay_key=None)
            hit = self._variants[key] = (k, variant)
        return hit[1]
