"""Which activations a kernel still finds in L2, and which it must fetch back from HBM.

The L2 is modelled as an LRU cache of the activations' bytes and of everything streamed
through it since: a kernel's weights or KV read from HBM, its writes. An activation read
after more than the L2's capacity has passed through since it was last written or read is
gone, and the kernel reads it from HBM instead (its round trips then wait on HBM latency).
This is what makes the per-expert element-wise kernels slower inside a step than alone:
each expert's weights (235 MB for Mixtral-8x7B) sweep the L2 between the token gather of
one expert and the next, and between a GEMM and the SiLU that reads its output.

A kernel's code is fetched the same way. An element-wise or row kernel that follows a kernel
of another kind finds its instructions gone from the SM's instruction cache (the GEMMs between
the per-expert kernels fill it) and waits, before its first load, on CODE_FETCH_TRIPS dependent
fetches: from L2, or from HBM when more than the L2's capacity has streamed through since the
kind last ran. Where the kernel also reads evicted data the two waits overlap (H200, after a
235 MB read: SiLU with cold code and warm data +0.35 us vectorised / +0.8 us strided, cold data
+0.6 / +1.5 us, both +0.6 / +1.6 us; calibration/data/h200_code_vs_data.jsonl), so only a
kernel whose data is all in L2 pays it. Isolated-kernel calibrations repeat one kernel, so their
code is always warm.

A kernel's own output counts as written before its own stream: on the H200 the output of a
GEMM that streams 235 MB of weights is read back at HBM cost even when every block writes
its only tile at the end (calibration/data/h200_after_gemm_cause.jsonl: SiLU on it 4.0 us,
on an evicted tensor 3.4 us, on a resident one 2.2 us at 4 rows; after a GEMM whose 15 MB
of weights stay in L2, 2.5 us).
"""

from __future__ import annotations

from bisect import bisect_left

from hwsim.model.kernel import Kernel, StreamItem, TimingKey, copy_kernel, timing_of

# Dependent instruction fetches before a cold kernel's first load, read off
# calibration/data/h200_code_vs_data.jsonl (code cold, data warm, less resident: HBM latency
# 345 ns a trip): vectorised kernels +0.35 us, PyTorch's strided elementwise_kernel +0.80 us
CODE_FETCH_TRIPS = 1.0
CODE_FETCH_TRIPS_STRIDED = 2.3


def _walk_info(k: Kernel) -> tuple:
    """What the walk reads of k, kept on its TimingKey (it follows from timing fields only):
    its reads (each with whether it reads only some rows), what it touches whole, what it
    touches in part, its rows' overlap, the bytes it streams through the L2 and the dependent
    fetches its code takes cold."""
    timing = k.timing or timing_of(k)
    partial = k.partial
    # PyTorch's strided element-wise kernel (the one kernel with an integer chain) has more code
    trips = CODE_FETCH_TRIPS_STRIDED if k.alu_chain > 1.0 else CODE_FETCH_TRIPS
    info = timing.walk = (
        tuple((name, name in partial) for name in k.reads),
        tuple(name for name in k.reads + k.writes if name not in partial), partial, k.row_overlap,
        k.tiles * (k.hbm_read + k.hbm_write + k.l2_write - k.l2_atomic), trips)
    return info


ROUNDED_LIMIT = 100_000      # evicted shares an L2Residency keeps rounded (they take few values)


def _touched_share(overlap: float, recent: int) -> float:
    """Share of a partial reader's rows still in L2: those another partial reader touched
    within the L2's capacity of streamed bytes (`recent` readers, each touching a row with
    chance `overlap`)."""
    return 1.0 - (1.0 - overlap) ** recent


class L2Residency:
    def __init__(self, capacity_bytes: float, spill_address: int, miss_to_hit: float = 1.0,
                 code_fetches: bool = True):
        self.capacity = capacity_bytes       # L2 bytes activations may use (less any pinned SRAM)
        self.code_fetches = code_fetches     # whether a kernel waits on its code (see the module's doc)
        self.spill_address = spill_address   # where an evicted activation is re-read from
        self.miss_to_hit = miss_to_hit       # HBM latency over L2-hit latency (code fetched from HBM)
        self.clock = 0.0                     # bytes through the L2 so far
        self.last_use: dict[str, float] = {}
        self.partial_uses: dict[str, list[float]] = {}   # since its last whole use: each partial touch
        self.code_last_use: dict[str, float] = {}
        self.previous_kind = ""
        self.rounded: dict[float, float] = {}   # an evicted share -> it to 3 decimals (round() is slow)

    def place(self, items: list[StreamItem]) -> list[StreamItem]:
        """The stream with each kernel that reads evicted activations replaced by a variant
        that reads them from HBM; the L2's state carries over to the next call (next step)."""
        walk = self.walk
        return [walk(item) if type(item) is Kernel else item for item in items]   # as the stream tells them

    def walk(self, k: Kernel) -> Kernel:
        """k, or its variant reading evicted activations from HBM (or waiting on its code),
        with the L2's state moved past it: call it on each kernel in stream order."""
        return self.walk_all((k,))[0]

    def walk_all(self, kernels) -> list[Kernel]:
        """walk() of each of `kernels` in turn (a routed expert's, every pass), the state in
        locals between them: this runs for every kernel of every step."""
        clock, last_use, capacity = self.clock, self.last_use, self.capacity
        partial_uses, code_last_use, previous_kind = self.partial_uses, self.code_last_use, self.previous_kind
        spill, code_fetches, rounded = self.spill_address, self.code_fetches, self.rounded
        out = []
        for k in kernels:
            # what it reads of k, worked out once per TimingKey; its code's kind
            timing = k.timing
            reads, whole, partial, overlap, streamed, trips = (timing and timing.walk) or _walk_info(k)
            kind = k.code
            evicted = 0.0                               # reads' worth of bytes that come from HBM
            for name, in_part in reads:
                last = last_use.get(name)
                if last is None or clock - last > capacity:
                    if in_part:                         # the share of its rows touched since
                        uses = partial_uses.get(name, ())
                        recent = len(uses) - bisect_left(uses, clock - capacity)
                        evicted += 1.0 - _touched_share(overlap, recent)
                    else:
                        evicted += 1.0
            for name in whole:                          # what it touches whole is resident now
                last_use[name] = clock
                if name in partial_uses:
                    del partial_uses[name]
            for name in partial:                        # what it touches in part: its rows only
                uses = partial_uses.get(name)
                if uses is None:
                    partial_uses[name] = [clock]
                else:
                    uses.append(clock)
            if evicted % 1.0:                           # only partial reads make fractions
                evicted = rounded.get(evicted) or self._rounded(evicted)
            code_trips = 0.0
            if code_fetches and reads and not evicted:  # its code: still on the SM, in L2 or in HBM
                last = code_last_use.get(kind)
                code_last_use[kind] = clock
                if kind != previous_kind:
                    previous_kind = kind
                    from_hbm = last is None or clock - last > capacity
                    code_trips = trips * (self.miss_to_hit if from_hbm else 1.0)
            clock += streamed
            if evicted or code_trips:
                variants = k.l2_variants       # kept on k: a memoised kernel's variants live (and die) with it
                k = (variants and variants.get((evicted, code_trips, spill))) or self._variant(k, evicted, code_trips)
            out.append(k)
        self.clock, self.previous_kind = clock, previous_kind
        return out

    def _rounded(self, evicted: float) -> float:
        """The evicted share a variant is made for: to 3 decimals, so that partial reads whose
        shares differ in the last bits share a variant. Memoised: the shares take few values."""
        if len(self.rounded) >= ROUNDED_LIMIT:
            self.rounded.clear()
        r = self.rounded[evicted] = round(evicted, 3)
        return r

    def _variant(self, k: Kernel, evicted: float, code_trips: float) -> Kernel:
        variants = k.l2_variants
        if variants is None:
            variants = k.l2_variants = {}
        key = (evicted, code_trips, self.spill_address)
        new = variants.get(key)
        if new is None:
            new = variants[key] = copy_kernel(k)        # fields set one by one: faster than **changes
            if evicted:
                moved = k.l2_read * evicted / len(k.reads)
                new.l2_read, new.hbm_read = k.l2_read - moved, k.hbm_read + moved
                new.address = k.address or self.spill_address
                if k.miss_trips < 0 and not k.hbm_read:
                    new.miss_trips = k.input_trips * min(1.0, evicted)
            if code_trips:
                new.start_trips = k.start_trips + code_trips
            new.timing = self._variant_timing(k, new, evicted, code_trips)
        return new

    @staticmethod
    def _variant_timing(k: Kernel, new: Kernel, evicted: float, code_trips: float) -> TimingKey:
        """new's TimingKey: its timing fields follow from k's and (evicted, code_trips) alone,
        so it is read off its fields once per template timing, not once per expert and step."""
        template = k.timing or timing_of(k)
        timing = template.variants.get((evicted, code_trips))
        if timing is None:
            timing = template.variants[evicted, code_trips] = timing_of(new)
        return timing
