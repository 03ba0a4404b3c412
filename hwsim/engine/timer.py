"""One timing path for a work item: it runs alone on a private, idle copy of the device's
memory path (hwsim/engine/memory_path.py), and the result is an Effect.

Fidelity strategies of that one path:
- `kernel` and `wave`: the kernel's waves, each queued on the servers at its own time. `at_once`
  computes them in one go; `events` yields one SimPy timeout per wave (the same numbers);
- `tile`: every tile's memory and compute requests, in numpy rounds (hwsim/engine/tile_rounds.py)
  `at_once`, or with one SimPy process per resident block slot (`events`; the reference).

A kernel ends when its last tile has run and, if it writes, one L2-hit latency later (its
stores are acknowledged). A copy is its chunks through the same levels (the HBM channels, the
bus, the L2 and the on-chip SRAM it lands in).
"""

from __future__ import annotations

from enum import Enum

from hwsim.hw.effect import Effect
from hwsim.engine.memory_path import MemoryPath
from hwsim.engine.tile_rounds import tile_rounds
from hwsim.hw.chip import ChipSpec
from hwsim.hw.device import Device
from hwsim.metrics import Component
from hwsim.model.kernel import Kernel


def _add(total: dict[Component, float], parts: dict[Component, float]) -> None:
    for comp, secs in parts.items():
        total[comp] = total.get(comp, 0.0) + secs


def _shifted(demand: dict, levels: dict, starts: list[float], shifts: list[float]) -> dict | None:
    """An item's demand with each memory level's done-at offset moved as the wave it fell in
    moved (each level moves its own: `shifted`); wave i started at starts[i] and now starts
    shifts[i] later. The SMs' slots are kept (no clock changes them); the decoder's work is
    redone by the caller. None where it asks a kind of unit not known here."""
    out = {}
    for kind, d in demand.items():
        level = levels.get(kind)
        if level is not None:
            out[kind] = level.shifted(d, starts, shifts)
        elif kind in ("sm", "decoder"):
            out[kind] = d
        else:
            return None
    return out


class Fidelity(Enum):
    """`runtime.fidelity`: the timing path's strategy (module docstring)."""
    KERNEL = "kernel"
    WAVE = "wave"
    TILE = "tile"


class KernelTimer:
    def __init__(self, chip: ChipSpec, fidelity: str | Fidelity, tile_processes: bool = False,
                 device: Device | None = None):
        """`fidelity`: `runtime.fidelity`, or its Fidelity. `device`: the device whose units
        give the memory path's levels (none: a device of `chip` as the profile builds it,
        without expert SRAM)."""
        self.chip = chip
        self.fidelity = Fidelity(fidelity)
        self.per_tile = self.fidelity is Fidelity.TILE      # else wave by wave
        self.path = MemoryPath(chip, (device or Device(chip)).memory_levels())
        self._levels = {level.kind: level for level in self.path.levels}    # by the demand kind each times
        self.tile_processes = tile_processes   # tile fidelity: SimPy processes per slot always
        self.timed = 0                         # items timed (not replayed)
        # effects of the same kernels timed on this chip at a higher SM clock, by replay key
        # (the maximum clock's, to a power governor's probe: hwsim/build.py Built.at_sm_clock);
        # a kernel among them walked wave by wave is re-timed from its walk (retimed)
        self.faster: dict[int, Effect] | None = None

    @property
    def uses_events(self) -> bool:
        """Whether a lone kernel is timed event by event on the simulation clock."""
        return self.fidelity is Fidelity.WAVE or (self.per_tile and self.tile_processes)

    # -- strategies ---------------------------------------------------------------------------
    def at_once(self, k: Kernel) -> Effect:
        """The kernel alone, computed in one go."""
        if self.faster is not None:
            faster = self.faster.get(k.replay_key)
            if faster is not None and faster.walk is not None:
                retimed = self.retimed(k, faster)
                if retimed is not None:
                    return retimed
        path = self.path
        path.reset()
        chip = self.chip
        t = chip.kernel_fixed_s
        parts = {Component.KERNEL_OVERHEAD: chip.kernel_fixed_s}
        walk = None
        if self.per_tile:
            t, chain, _ = tile_rounds(path, k, t)
            _add(parts, chain)
        else:
            walk = []
            for per_sm, first, in_wave, fill in path.waves(k):
                start = t
                t, chain = path.burst(t, 0, k, per_sm, first, wave_tiles=in_wave, fill=fill)
                _add(parts, chain)
                (_, latency), (component, body) = chain.items()
                walk.append((start, per_sm, fill, latency, body, component))
        if k.l2_write or k.hbm_write:   # the kernel ends when its last stores are acknowledged
            t += chip.hit_latency_s
            parts[Component.KERNEL_OVERHEAD] += chip.hit_latency_s
        return self._effect(k, 0.0, t, parts, walk=walk and tuple(walk))

    def retimed(self, k: Kernel, faster: Effect) -> Effect | None:
        """Kernel k alone at this chip's clock, from `faster`, its effect walked at a higher SM
        clock (None where it cannot be: the path is walked again). Issue 33: time once, re-scale
        the clock-dependent parts. Each wave starts on an idle memory path (the one before it
        ends after its last bytes land), so its bytes land at its start plus a time M that no
        SM clock changes (the levels' rates and the load pipes' latencies are the memory
        system's); what the clock changes is the fixed cost before the first wave and each
        wave's compute (ChipSpec.at_sm_clock). M is the body of a memory-bound wave; a wave
        compute-bound at the higher clock is the more so at a lower one. The arithmetic of the
        walk (MemoryPath.burst), but M, recovered as the body (end - start: one rounding): a
        walk at this clock gives the same to about 1e-16."""
        walk = faster.walk
        chip, path = self.chip, self.path
        if walk[0][0] > chip.kernel_fixed_s or (k.data is k.compute and k.data is Component.KV_READ):
            return None       # walked at a lower clock (its fixed cost longer), or charged by its clock
        t = chip.kernel_fixed_s
        parts = {Component.KERNEL_OVERHEAD: t}
        retimed = []
        for _, per_sm, fill, latency, body, component in walk:
            compute_s = per_sm * path.tile_compute_s(k, per_sm)
            compute_done = t + max(compute_s, path.chain_floor_s(k, per_sm))
            if fill and k.alu_chain > 1.0:
                compute_done = max(compute_done, t + k.alu_chain * compute_s / per_sm)
            if component is k.data:         # memory-bound (or charged alike either way)
                mem_done = t + body
                body_end = max(mem_done, compute_done)
                charged = k.data if mem_done >= compute_done else path.compute_component(k)
            else:                           # compute-bound, the more at a lower clock
                body_end, charged = compute_done, path.compute_component(k)
            _add(parts, {Component.KERNEL_OVERHEAD: latency, charged: body_end - t})
            retimed.append((t, per_sm, fill, latency, body_end - t, charged))
            t = body_end + latency
        starts = [w[0] for w in walk]
        demand = _shifted(faster.demand, self._levels, starts, [w[0] - start for w, start in zip(retimed, starts)])
        if demand is None:
            return None
        if k.l2_write or k.hbm_write:
            t += chip.hit_latency_s
            parts[Component.KERNEL_OVERHEAD] += chip.hit_latency_s
        if "decoder" in demand:
            demand["decoder"] = self._decoder_seconds(k)
        self.timed += 1
        return Effect(duration=float(t), parts=parts, waves=faster.waves, data=faster.data,
                      hbm_bytes=faster.hbm_bytes, demand=demand, hbm_read=faster.hbm_read,
                      hbm_write=faster.hbm_write, walk=tuple(retimed), tensor_flops=faster.tensor_flops)

    def events(self, env, k: Kernel):
        """SimPy process body: the kernel alone, from env.now, a timeout per wave (wave
        fidelity) or a process per resident block slot (tile fidelity). Returns its Effect."""
        path = self.path
        path.reset()
        chip = self.chip
        start = env.now
        yield env.timeout(chip.kernel_fixed_s)
        parts = {Component.KERNEL_OVERHEAD: chip.kernel_fixed_s}
        if self.per_tile:
            chain = yield from self._tile_processes(env, k)
        else:
            chain = {}
            for per_sm, first, in_wave, fill in path.waves(k):
                end, wave = path.burst(env.now, 0, k, per_sm, first, wave_tiles=in_wave, fill=fill)
                yield env.timeout(end - env.now)
                _add(chain, wave)
        _add(parts, chain)
        if k.l2_write or k.hbm_write:
            yield env.timeout(chip.hit_latency_s)
            parts[Component.KERNEL_OVERHEAD] += chip.hit_latency_s
        return self._effect(k, start, env.now, parts)

    def _tile_processes(self, env, k: Kernel):
        path = self.path
        slots = self.chip.sms * path.slots_per_sm(k)
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
                end, parts = path.burst(env.now, slot_id, k, per_unit, unit * per_unit, fill=first)
                first = False
                yield env.timeout(end - env.now)
                _add(chain, parts)
            chains.append((env.now, chain))

        procs = [env.process(slot(s)) for s in range(min(slots, units))]
        yield env.all_of(procs)
        # The critical path is the slot that finished last; its tiles ran back to back.
        return max(chains, key=lambda c: c[0])[1]

    def copy(self, address: float, nbytes: float, stack: int) -> Effect:
        """A copy engine moving `nbytes` from HBM into on-chip SRAM, alone: PREFETCH_INFLIGHT
        chunks in flight, each batch waiting for its last chunk to land."""
        from hwsim.engine.memory_path import PREFETCH_CHUNK, PREFETCH_INFLIGHT
        path = self.path
        path.reset()
        t, offset = 0.0, 0.0
        batch = PREFETCH_CHUNK * PREFETCH_INFLIGHT
        while offset < nbytes:
            t = path.copy_batch_done(t, address + offset, min(batch, nbytes - offset), stack)
            offset += batch
        return self._effect(None, 0.0, t, {Component.EXPERT_LOAD_WAIT: t}, data=Component.EXPERT_READ)

    # -- the result ------------------------------------------------------------------------------
    def _decoder_seconds(self, k: Kernel) -> float:
        """SM-seconds of the kernel's native decoder work (its demand of the decoder)."""
        return k.tiles * k.decoder_elements / (self.chip.decoder_elements_per_clk * self.chip.clock_hz)

    def _effect(self, k: Kernel | None, start: float, end: float, parts: dict[Component, float],
                data: Component | None = None, walk: tuple | None = None) -> Effect:
        self.timed += 1
        path = self.path
        demand = {}
        for level in path.levels:
            d = level.demand(start)
            if d is not None:
                demand[level.kind] = d
        if k is not None:
            slots = path.resident_slots(k)
            if slots:
                demand["sm"] = slots
            if k.decoder_elements:
                demand["decoder"] = self._decoder_seconds(k)
        return Effect(
            duration=float(end - start), parts=parts,
            waves=path.wave_count(k) if k is not None else 0,
            data=k.data if k is not None else data,
            hbm_bytes=k.hbm_bytes if k is not None else path.hbm.read_bytes, demand=demand,
            hbm_read=path.hbm.read_bytes, hbm_write=path.hbm.write_bytes, walk=walk,
            tensor_flops=k.tiles * k.tensor_flops if k is not None else 0.0, copy=k is None)
