"""The wired chip: SMs, L2, the on-chip bus, HBM channels and the kernel dispatcher.

`System.run_stream` is the SimPy process that plays one CUDA stream: it dispatches kernels
in order (graph replay or eager host launches) and runs each kernel's thread blocks on the
SM array, timing every memory burst through the SM load pipes, the bus, the L2 and the HBM
channels it maps to, and every MMA through the SM's tensor pipe.

Three fidelities share this resource model:
- `tile`: one SimPy process per resident thread-block slot; each tile queues its own bytes
  and flops, so channel interleaving and stragglers are resolved per tile;
- `wave`: the tiles of one wave are queued together (one event per wave);
- `kernel`: the waves of one kernel are queued at their own simulated times but computed in
  one go (one event per kernel): identical to `wave` unless a concurrent copy is in flight,
  when it falls back to `wave`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

from hwsim.hw.chip import ChipSpec
from hwsim.hw.hbm import Hbm
from hwsim.hw.replay import KernelReplay
from hwsim.hw.server import Server
from hwsim.hw.sm import SmArray
from hwsim.hw.tile_rounds import tile_rounds
from hwsim.metrics import Component
from hwsim.model.kernel import Kernel, PrefetchLoad, StreamItem

PREFETCH_CHUNK = 1 << 20     # bytes per copy request of an expert prefetch
PREFETCH_INFLIGHT = 8        # copy requests in flight (a TMA/copy-engine queue depth)


@dataclass(slots=True)
class KernelRecord:
    """What happened to one kernel: its timing and where its time went (critical path).
    Its sizes are read off the kernel it ran (one object a shape, shared across steps)."""

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
        return self.kernel.name

    @property
    def layer(self) -> int:
        return self.kernel.layer

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


@dataclass
class StreamTotals:
    """Where the stream's time went and the HBM bytes its kernels moved (by each kernel's data
    component), summed as kernels complete; replays are added in bulk when the replay flushes."""

    parts: dict[Component, float] = field(default_factory=dict)
    moved: dict[Component, float] = field(default_factory=dict)
    kernels: int = 0

    def add(self, parts: dict[Component, float], data: Component, hbm_bytes: float, count: int = 1) -> None:
        for comp, secs in parts.items():
            self.parts[comp] = self.parts.get(comp, 0.0) + count * secs
        self.moved[data] = self.moved.get(data, 0.0) + count * hbm_bytes

    def add_seconds(self, component: Component, secs: float) -> None:
        self.parts[component] = self.parts.get(component, 0.0) + secs


def _add(total: dict[Component, float], parts: dict[Component, float]) -> None:
    for comp, secs in parts.items():
        total[comp] = total.get(comp, 0.0) + secs


class System:
    def __init__(self, env: simpy.Environment, chip: ChipSpec, *, launch: str, fidelity: str,
                 reuse: bool = True, tile_processes: bool = False):
        self.env = env
        self.chip = chip
        self.launch = launch
        self.fidelity = fidelity
        self.sms = SmArray(chip)
        self.hbm = Hbm(stacks=chip.hbm_stacks, channels_per_stack=chip.hbm_channels_per_stack,
                       peak_bytes_s=chip.hbm_peak_bytes_s, read_efficiency=chip.hbm_read_efficiency,
                       write_efficiency=chip.hbm_write_efficiency,
                       interleave_bytes=chip.hbm_interleave_bytes)
        self.l2 = Server("l2", chip.l2_bytes_s)
        self.bus = Server("bus", chip.bus_bytes_s)
        self.host = Server("host.launch", 1.0)
        self.events = 0
        self.landed: dict[tuple[int, int], simpy.Event] = {}   # expert prefetches in flight or done
        self.prefetch_bytes = 0.0
        self.copies_in_flight = 0
        self.copy_records: list[tuple[str, float, float, float, int]] = []   # (key, start, end, bytes, stack)
        self.replay = KernelReplay(self) if reuse else None
        # tile fidelity: a SimPy process per block slot always (the reference), not only
        # while a copy is in flight; otherwise numpy rounds (hwsim/hw/tile_rounds.py)
        self.tile_processes = tile_processes
        self.totals = StreamTotals()

    # -- occupancy -------------------------------------------------------------------------
    def slots_per_sm(self, kernel: Kernel) -> int:
        """Resident thread blocks per SM: the profile's limit, or fewer if shared memory says so."""
        slots = self.chip.cta_slots_per_sm
        if kernel.smem_bytes:
            slots = min(slots, max(1, self.chip.smem_bytes_per_sm // kernel.smem_bytes))
        return slots

    # -- one burst of work on one SM ------------------------------------------------------
    def _chip_memory_done(self, now: float, k: Kernel, ntiles: float, first_tile: float) -> float:
        """Queue ntiles' bytes on the bus, the L2 and the HBM channels their addresses map to;
        return when the last of them lands."""
        hbm_r, hbm_w = k.hbm_read * ntiles, k.hbm_write * ntiles
        l2 = (k.l2_read + k.l2_write) * ntiles
        done = self.bus.serve(now, hbm_r + hbm_w + l2)
        if l2:
            done = max(done, self.l2.serve(now, l2))
        if hbm_r:
            done = max(done, self.hbm.read(now, k.address + first_tile * k.hbm_read, hbm_r, k.channel_group))
        if hbm_w:
            done = max(done, self.hbm.write(now, k.address + first_tile * k.hbm_write, hbm_w))
        return done

    def _memory_done(self, now: float, slot: int, k: Kernel, ntiles: float, first_tile: float) -> float:
        """Tile fidelity: the tile's bytes through its block slot's load pipe and the chip."""
        concurrent = min(k.tiles, self.chip.sms * self.slots_per_sm(k)) * ntiles   # tiles in flight chip-wide
        busy = self.sms.load_time(k.hbm_read * ntiles, (k.l2_read + k.l2_write) * ntiles,
                                  k.hbm_read * concurrent, k.inflight_bytes)
        pipe = self.sms.load_pipes[slot].serve(now, busy * self.chip.inflight_bytes_per_block)
        return max(pipe, self._chip_memory_done(now, k, ntiles, first_tile))

    def _burst(self, now: float, slot: int, k: Kernel, ntiles: float, first_tile: float,
               wave_tiles: float = 0, fill: bool = True) -> tuple[float, dict]:
        """Time `ntiles` tiles in block slot `slot`, or (wave fidelity, wave_tiles > 0) a wave
        of `wave_tiles` tiles whose busiest SM runs `ntiles`; return the end time and where
        the time went.

        Loads and MMAs are software-pipelined inside a tile, so the tile takes the longer of
        its memory stream and its compute. One load latency is exposed to fill the pipeline
        (`fill`) on an SM's first tile of a kernel only: later tiles start while the other
        resident blocks keep the SM's loads in flight, which the pipe's rate already counts.
        A tile's further dependent round trips (k.round_trips - 1: an index before its data,
        a softmax before the V block) are serial within its block slot, so every tile in the
        slot waits on them, not just the first.
        """
        trips = k.round_trips + k.start_trips if fill else k.round_trips - 1
        latency = self.sms.trips_latency(k, trips)
        if fill and k.decoder_elements:
            latency += self.chip.decoder_latency_s
        compute_s = ntiles * self.sms.compute_time(k.tensor_flops, k.vector_flops, k.int_ops, k.dtype,
                                                   k.decoder_elements, k.mma_sync)
        if wave_tiles:
            mem_done = self._wave_memory_done(now, k, ntiles, wave_tiles, first_tile)
            compute_done = now + compute_s
        else:
            mem_done = self._memory_done(now, slot, k, ntiles, first_tile)
            compute_done = self.sms.tensor[slot % self.chip.sms].serve(now, compute_s)
        body_end = max(mem_done, compute_done)
        end = body_end + latency
        body = body_end - now
        component = k.data if mem_done >= compute_done else self._compute_component(k)
        return end, {Component.KERNEL_OVERHEAD: latency, component: body}

    def _compute_component(self, k: Kernel) -> Component:
        """A compute-bound attention tile is charged to dequantization when unpacking its KV is
        its longest pipe (other kernels' integer work is address arithmetic, not unpacking)."""
        if (k.int_ops or k.decoder_elements) and k.data is Component.KV_READ:
            sms = self.sms
            dequant = sms.compute_time(0, 0, k.int_ops, k.dtype, k.decoder_elements)
            if dequant >= sms.compute_time(k.tensor_flops, k.vector_flops, 0, k.dtype, 0.0, k.mma_sync):
                return Component.DEQUANT
        return k.compute

    def _wave_memory_done(self, now: float, k: Kernel, tiles_per_sm: float, total: float,
                          first_tile: float) -> float:
        """Wave fidelity: the whole wave's bytes queued at once. Resident blocks each have
        their own load pipe; tiles beyond the resident slots (stream-K shares) queue on them."""
        per_slot = max(1.0, tiles_per_sm / self.slots_per_sm(k))
        pipe = self.sms.load_time(k.hbm_read * per_slot, (k.l2_read + k.l2_write) * per_slot,
                                  k.hbm_read * total, k.inflight_bytes)
        return max(now + pipe, self._chip_memory_done(now, k, total, first_tile))

    # -- a kernel --------------------------------------------------------------------------
    def run_kernel(self, k: Kernel):
        """SimPy process body for one kernel's grid; returns (where the time went, waves)."""
        env = self.env
        chip = self.chip
        slots = chip.sms * self.slots_per_sm(k)
        yield env.timeout(chip.kernel_fixed_s)
        self.events += 1
        attribution = {Component.KERNEL_OVERHEAD: chip.kernel_fixed_s}
        if self.fidelity != "tile":
            chain = yield from self._run_waves(k, slots)
        elif self.copies_in_flight or self.tile_processes:   # a copy's requests interleave event by event
            chain = yield from self._run_tiles(k, slots)
        else:
            end, chain, events = tile_rounds(self, k, env.now)
            yield env.timeout(end - env.now)
            self.events += events
        _add(attribution, chain)
        if k.l2_write or k.hbm_write:   # the kernel ends when its last stores are acknowledged
            yield env.timeout(chip.hit_latency_s)
            self.events += 1
            attribution[Component.KERNEL_OVERHEAD] += chip.hit_latency_s
        return attribution, math.ceil(k.tiles / slots)

    def _waves(self, k: Kernel, slots: int):
        """The kernel's waves as (tiles_per_sm, first_tile, tiles_in_wave, fill) tuples."""
        if k.balanced:   # stream-K: every SM gets tiles/sms tiles' worth of work, in one pass
            yield k.tiles / self.chip.sms, 0, k.tiles, True
            return
        done = 0
        while done < k.tiles:
            in_wave = min(slots, k.tiles - done)
            active = min(self.chip.sms, in_wave)
            yield math.ceil(in_wave / active), done, in_wave, done == 0
            done += in_wave

    def _run_waves(self, k: Kernel, slots: int):
        env = self.env
        chain: dict[Component, float] = {}
        for per_sm, first, in_wave, fill in self._waves(k, slots):
            end, parts = self._burst(env.now, 0, k, per_sm, first, wave_tiles=in_wave, fill=fill)
            yield env.timeout(end - env.now)
            self.events += 1
            _add(chain, parts)
        return chain

    def _kernel_at_once(self, k: Kernel, start: float) -> tuple[float, dict[Component, float], int]:
        """`kernel` fidelity: the same fixed cost, waves and drain as `wave` fidelity, each
        queued on the servers at its own simulated time, but computed in one go so the kernel
        costs one SimPy event. Exact whenever nothing else uses the servers meanwhile (the
        stream falls back to per-wave events while an expert prefetch is in flight).
        Returns (end, where the time went, waves)."""
        chip = self.chip
        slots = chip.sms * self.slots_per_sm(k)
        t = start + chip.kernel_fixed_s
        attribution = {Component.KERNEL_OVERHEAD: chip.kernel_fixed_s}
        for per_sm, first, in_wave, fill in self._waves(k, slots):
            t, parts = self._burst(t, 0, k, per_sm, first, wave_tiles=in_wave, fill=fill)
            _add(attribution, parts)
        if k.l2_write or k.hbm_write:
            t += chip.hit_latency_s
            attribution[Component.KERNEL_OVERHEAD] += chip.hit_latency_s
        return t, attribution, math.ceil(k.tiles / slots)

    def _run_tiles(self, k: Kernel, slots: int):
        env = self.env
        next_tile = [0]
        chains: list[tuple[float, dict]] = []
        units, per_unit = k.tiles, 1.0
        if k.balanced:   # stream-K: one equal share of the tiles per resident block slot
            units = min(slots, k.tiles)
            per_unit = k.tiles / units

        def slot(slot_id: int):
            chain: dict[Component, float] = {}
            first = True
            while next_tile[0] < units:
                unit = next_tile[0]
                next_tile[0] += 1
                end, parts = self._burst(env.now, slot_id, k, per_unit, unit * per_unit, fill=first)
                first = False
                yield env.timeout(end - env.now)
                self.events += 1
                _add(chain, parts)
            chains.append((env.now, chain))

        procs = [env.process(slot(s)) for s in range(min(slots, units))]
        yield env.all_of(procs)
        # The critical path is the slot that finished last; its tiles ran back to back.
        return max(chains, key=lambda c: c[0])[1]

    # -- expert prefetch (a copy engine beside the stream) -----------------------------------
    def _prefetch(self, item: PrefetchLoad):
        """Copy each expert in PREFETCH_CHUNK pieces, PREFETCH_INFLIGHT at a time, through the
        same HBM channels, bus and L2 the stream uses: it competes for their bandwidth."""
        env = self.env
        for key, address, nbytes, stack in item.loads:
            started = env.now
            offset = 0.0
            while offset < nbytes:
                now = env.now
                batch_end = now
                for _ in range(PREFETCH_INFLIGHT):
                    if offset >= nbytes:
                        break
                    chunk = min(PREFETCH_CHUNK, nbytes - offset)
                    end = self.hbm.read(now, address + offset, chunk, stack)
                    end = max(end, self.bus.serve(now, chunk), self.l2.serve(now, chunk))
                    batch_end = max(batch_end, end + self.chip.miss_latency_s)
                    offset += chunk
                yield env.timeout(batch_end - now)
                self.events += 1
            self.prefetch_bytes += nbytes
            self.copy_records.append((f"L{key[0]}.expert{key[1]}", started, env.now, nbytes, stack))
            self.landed[key].succeed(env.now)
        self.copies_in_flight -= 1

    # -- a stream of kernels -------------------------------------------------------------
    def run_stream(self, items: list[StreamItem], step: int, records: list[KernelRecord] | None):
        """Dispatch kernels in order on one stream (starting prefetches and waiting on them
        where the schedule says); add each kernel to self.totals, and append a KernelRecord
        per kernel to `records` unless it is None.

        At `kernel` fidelity with no copy in flight a kernel is timed in one go, so the stream
        keeps its own clock (`now`) and runs ahead of SimPy's: it hands control back (one
        timeout) only when another process has an event due before the stream's time, or
        before it starts or waits on a copy. Nothing else can touch the servers meanwhile, so
        the timings are those of yielding once per kernel, at a fraction of the cost."""
        env = self.env
        chip = self.chip
        graph = self.launch == "graph"
        kernel_fidelity = self.fidelity == "kernel"
        replay = self.replay
        totals = self.totals
        now = env.now      # the stream's clock; env.now catches up at every hand-back
        horizon = env.peek()   # the next event of any other process (fixed until we yield)
        host_t = now       # the host starts issuing when the step starts (after the last sync)
        waited = 0.0       # expert-load wait since the previous kernel ended
        launch_total = wait_total = 0.0
        i = -1
        for k in items:
            if type(k) is not Kernel:
                if now > env.now:
                    yield env.timeout(now - env.now)
                if isinstance(k, PrefetchLoad):
                    for key, *_ in k.loads:
                        self.landed[key] = env.event()
                    # counted now, not when the process first runs: the next kernel must already
                    # see the copy engine as busy and queue its bytes event by event
                    self.copies_in_flight += 1
                    env.process(self._prefetch(k))
                else:
                    event = self.landed.get(k.key)
                    if event is not None and not event.triggered:
                        yield event
                        waited += env.now - now
                now = env.now
                horizon = env.peek()
                continue
            i += 1
            ready = now - waited
            if graph:
                dispatch = now + chip.launch_graph_s
            else:
                host_t = self.host.serve(host_t, chip.launch_eager_s)
                dispatch = max(now, host_t)
            if kernel_fidelity and not self.copies_in_flight:
                timed = replay.time(k, dispatch) if replay else None
                if timed is None:
                    now, parts, waves = self._kernel_at_once(k, dispatch)
                    totals.add(parts, k.data, k.hbm_bytes)
                else:
                    effect, replayed = timed
                    now, parts, waves = dispatch + effect.duration, effect.attribution, effect.waves
                    if not replayed:     # a replay's totals are added when the replay flushes
                        totals.add(parts, k.data, k.hbm_bytes)
                self.events += 1
                if horizon < now:     # another process acts before this kernel ends
                    yield env.timeout(now - env.now)
                    horizon = env.peek()
            else:
                if now > env.now:
                    yield env.timeout(now - env.now)
                if dispatch > env.now:
                    yield env.timeout(dispatch - env.now)
                    self.events += 1
                dispatch = max(dispatch, env.now)
                parts, waves = yield from self.run_kernel(k)
                now = env.now
                horizon = env.peek()
                totals.add(parts, k.data, k.hbm_bytes)
            launch = dispatch - ready - waited
            launch_total += launch
            wait_total += waited
            if records is not None:
                records.append(KernelRecord(step, i, k, ready, dispatch, now, waves, parts, launch, waited))
            waited = 0.0
        totals.kernels += i + 1
        totals.add_seconds(Component.LAUNCH_OVERHEAD, launch_total)
        totals.add_seconds(Component.EXPERT_LOAD_WAIT, wait_total)
        if now > env.now:
            yield env.timeout(now - env.now)
        if self.replay:
            self.replay.flush()
