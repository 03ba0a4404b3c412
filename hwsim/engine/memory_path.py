"""The memory and compute path of one work item, written once: its bytes through the SM load
pipes (Little's law), the on-chip bus, the L2 and the HBM channels its addresses map to, and
its MMAs through the SM's tensor pipe.

Every path is a FIFO rate server (hwsim/hw/server.py). A work item is timed on a private
copy of them, idle when it starts (hwsim/engine/timer.py): inside one item the servers
resolve its own requests (channel interleaving, stragglers, the load pipes' limit); between
the items of concurrent streams the device's units are shared through SimPy events
(hwsim/engine/sharing.py).

A tile's bytes go through the path's levels, built by the device's units on the memory path
(`Device.memory`, in order: the bus, the L2, the on-chip SRAM where experts are kept, the HBM
channels; hwsim/hw/levels.py), each serving one request (`serve`: the kernel timer, a
few-tile kernel), a round of tiles in order (`serve_round`: tile_rounds.py) or a copy's chunk
(`fill`), walked in one place (`memory_done`, `round_memory_done`, `copy_batch_done`) that
knows no kind of level. A new memory unit gives its level (`Unit.level`); nothing here changes.
"""

from __future__ import annotations

import math

import numpy as np

from hwsim.hw.levels import HbmLevel
from hwsim.hw.chip import ChipSpec
from hwsim.hw.occupancy import MAX_BLOCKS_PER_SM, resident_blocks
from hwsim.hw.sm import SmArray
from hwsim.metrics import Component
from hwsim.model.kernel import Kernel

# the profile's cta_slots_per_sm counts blocks of this many threads (4 x 512 of 2048 per SM);
# smaller blocks fit more, up to the 32 resident blocks an SM holds (hwsim/hw/occupancy.py)
DEFAULT_BLOCK_THREADS = 512
PREFETCH_CHUNK = 1 << 20     # bytes per copy request of an expert prefetch
PREFETCH_INFLIGHT = 8        # copy requests in flight (a TMA/copy-engine queue depth)


class MemoryPath:
    def __init__(self, chip: ChipSpec, levels: tuple):
        """`levels`: the memory levels a tile's bytes cross, in order, built by a device's
        units (`Device.memory_levels`: hwsim/hw/levels.py); walked in one place
        (memory_done, round_memory_done, copy_batch_done) by the timer and the tile rounds."""
        self.chip = chip
        self.sms = SmArray(chip)
        self.levels = levels
        # the HBM's byte counters (an Effect's) and its interleave (the replay key's)
        self.hbm = next(level.hbm for level in levels if isinstance(level, HbmLevel))
        self._pipes_used = False

    def reset(self) -> None:
        """Every server idle at time 0, with nothing served: the state a work item is timed from."""
        for level in self.levels:
            level.reset()
        if self._pipes_used:       # only the per-slot tile processes touch the SMs' own servers
            for srv in (*self.sms.load_pipes, *self.sms.tensor):
                srv.free_at = srv.busy_s = srv.units = 0.0
            self._pipes_used = False

    # -- occupancy -------------------------------------------------------------------------
    def slots_per_sm(self, kernel: Kernel) -> int:
        """Resident thread blocks per SM: the profile's limit (blocks of DEFAULT_BLOCK_THREADS),
        as many more as the kernel's blocks are smaller (at most MAX_BLOCKS_PER_SM), or fewer if
        shared memory says so; a kernel that says its registers (as compiled), CUDA occupancy."""
        if kernel.regs_per_thread:
            c = self.chip
            return resident_blocks(c.regs_per_sm, c.smem_bytes_per_sm, kernel.block_threads,
                                   kernel.regs_per_thread, kernel.smem_bytes)
        slots = self.chip.cta_slots_per_sm
        if kernel.block_threads:
            slots = min(MAX_BLOCKS_PER_SM, max(1, slots * DEFAULT_BLOCK_THREADS // kernel.block_threads))
        if kernel.smem_bytes:
            slots = min(slots, max(1, self.chip.smem_bytes_per_sm // kernel.smem_bytes))
        return slots

    # -- compute of one tile --------------------------------------------------------------
    def tile_compute_s(self, k: Kernel, present: float = 0) -> float:
        """Seconds of SM compute one tile takes of its SM's pipes: its lanes, and of a latency-bound
        loop (k.chain_ops) its chain's stalls shared by the programs the SM holds at once."""
        return self.sms.compute_time(k.tensor_flops, k.vector_flops, self.int_ops(k, present), k.dtype,
                                     k.decoder_elements, k.mma_sync, k.tensor_share)

    def int_ops(self, k: Kernel, present: float = 0) -> float:
        """Integer ops one tile charges its SM's ALU: its lanes, which the SM issues one program at a
        time, plus its chain's stalls beyond them (k.chain_ops - lanes), which the programs it holds
        at once overlap. Issue 44, chosen on the fit's rows alone (H100, inline-PTX, no lean row):
        this form fits them at 6.2% median, stalls and issue both overlapped (the least time,
        max(lanes, chain / resident)) at 9.4%: adaptive-2's three programs an SM took 0.58x fast2's
        one's time at >= 32k, not 1/3 (validation/fast_kernels_measured.md section 3d). `present`: the
        programs its SM holds in this wave (a wave timer's tiles an SM; 0: its slots): fewer than the
        slots overlap fewer stalls (issue 44, session 21: two programs on a 3-slot SM take chain +
        lanes, not less than the chain one of them runs alone; section 3e)."""
        if not k.chain_ops:
            return k.int_ops
        together = self.slots_per_sm(k)
        if present:
            together = max(1, min(together, math.ceil(present - 1e-9)))
        return k.int_ops + max(0.0, k.chain_ops - k.int_ops) / together

    def chain_floor_s(self, k: Kernel, ntiles: float) -> float:
        """The least time an SM's ntiles tiles of a latency-bound loop take: a round of its
        resident programs at a time, each round one program's whole chain (0: no chain)."""
        if not k.chain_ops:
            return 0.0
        rounds = math.ceil(ntiles / self.slots_per_sm(k) - 1e-9)
        return max(1, rounds) * self.sms.compute_time(0.0, 0.0, k.chain_ops, k.dtype)

    def resident_slots(self, k: Kernel) -> int:
        return min(k.tiles, self.chip.sms * self.slots_per_sm(k))

    # -- bytes through the levels ----------------------------------------------------------
    def memory_done(self, now: float, read: float, read_at: float, write: float, write_at: float,
                    l2: float, sram: float, group: int) -> float:
        """Queue one request's bytes on every level (HBM reads of `read` bytes at `read_at`,
        writes at `write_at`, L2 hits of `l2`, `sram` of them from the on-chip SRAM); return
        when the last of them lands."""
        done = now
        for level in self.levels:
            d = level.serve(now, read, read_at, write, write_at, l2, sram, group)
            if d is not None and d > done:
                done = d
        return done

    def round_memory_done(self, a: np.ndarray, read: float, read_at: np.ndarray | None, write: float,
                          write_at: np.ndarray | None, l2: float, sram: float, group: int) -> np.ndarray:
        """memory_done for a round of equal requests arriving at `a` (sorted), the i-th at
        read_at[i] and write_at[i] (None where nothing is read or written): each level serves
        them in order (tile_rounds.py)."""
        done = None
        for level in self.levels:
            d = level.serve_round(a, read, read_at, write, write_at, l2, sram, group)
            if d is not None:
                done = d if done is None else np.maximum(done, d)
        return done

    # -- bytes of a kernel's tiles, and of a copy -------------------------------------------------
    def chip_memory_done(self, now: float, k: Kernel, ntiles: float, first_tile: float) -> float:
        """Queue ntiles' bytes on the levels (the bus, the L2, the SRAM, the HBM channels their
        addresses map to); return when the last of them lands."""
        return self.memory_done(now, k.hbm_read * ntiles, k.address + first_tile * k.hbm_read,
                                k.hbm_write * ntiles, k.address + first_tile * k.hbm_write,
                                (k.l2_read + k.l2_write) * ntiles, k.sram_read * ntiles, k.channel_group)

    def slot_memory_done(self, now: float, slot: int, k: Kernel, ntiles: float, first_tile: float) -> float:
        """One tile's bytes through its block slot's load pipe and the chip."""
        self._pipes_used = True
        concurrent = min(k.tiles, self.chip.sms * self.slots_per_sm(k)) * ntiles   # tiles in flight chip-wide
        busy = self.sms.load_time(k.hbm_read * ntiles, (k.l2_read + k.l2_write) * ntiles,
                                  k.hbm_read * concurrent, k.inflight_bytes)
        pipe = self.sms.load_pipe(slot).serve(now, busy * self.chip.inflight_bytes_per_block)
        return max(pipe, self.chip_memory_done(now, k, ntiles, first_tile))

    def wave_memory_done(self, now: float, k: Kernel, tiles_per_sm: float, total: float,
                         first_tile: float) -> float:
        """A whole wave's bytes queued at once. Resident blocks each have their own load pipe;
        tiles beyond the resident slots (stream-K shares) queue on them."""
        per_slot = max(1.0, tiles_per_sm / self.slots_per_sm(k))
        pipe = self.sms.load_time(k.hbm_read * per_slot, (k.l2_read + k.l2_write) * per_slot,
                                  k.hbm_read * total, k.inflight_bytes)
        return max(now + pipe, self.chip_memory_done(now, k, total, first_tile))

    def copy_batch_done(self, now: float, address: float, nbytes: float, stack: int) -> float:
        """One batch of a copy engine's requests (up to PREFETCH_INFLIGHT chunks) issued at
        `now`; return when the last lands. Each chunk crosses every level as a copy does
        (`fill`: read from the HBM channels of `stack`, over the bus, into the L2's lines or
        the SRAM)."""
        chunks = []
        offset = 0.0
        for _ in range(PREFETCH_INFLIGHT):
            if offset >= nbytes:
                break
            chunks.append((offset, min(PREFETCH_CHUNK, nbytes - offset)))
            offset += PREFETCH_CHUNK
        done = now
        for level in self.levels:
            d = level.fill(now, address, chunks, stack)
            if d > done:
                done = d
        return done + self.chip.miss_latency_s

    # -- one burst of work on one SM ------------------------------------------------------
    def burst(self, now: float, slot: int, k: Kernel, ntiles: float, first_tile: float,
              wave_tiles: float = 0, fill: bool = True) -> tuple[float, dict]:
        """Time `ntiles` tiles in block slot `slot`, or (wave_tiles > 0) a wave of `wave_tiles`
        tiles whose busiest SM runs `ntiles`; return the end time and where the time went.

        Loads and MMAs are software-pipelined inside a tile, so the tile takes the longer of
        its memory stream and its compute. One load latency is exposed to fill the pipeline
        (`fill`) on an SM's first tile of a kernel only: later tiles start while the other
        resident blocks keep the SM's loads in flight, which the pipe's rate already counts.
        A tile's further dependent round trips (k.round_trips - 1: an index before its data,
        a softmax before the V block) are serial within its block slot, so every tile in the
        slot waits on them, not just the first.
        """
        trips = k.round_trips + k.start_trips if fill else k.round_trips - 1
        latency = self.sms.trips_latency(k.hbm_read, k.miss_trips, trips)
        if fill and k.decoder_elements:
            latency += self.chip.decoder_latency_s
        compute_s = ntiles * self.tile_compute_s(k, ntiles if wave_tiles else 0)
        if wave_tiles:
            mem_done = self.wave_memory_done(now, k, ntiles, wave_tiles, first_tile)
            compute_done = now + max(compute_s, self.chain_floor_s(k, ntiles))
        else:
            mem_done = self.slot_memory_done(now, slot, k, ntiles, first_tile)
            compute_done = self.sms.tensor[slot % self.chip.sms].serve(now, compute_s)
            compute_done = max(compute_done, now + self.chain_floor_s(k, ntiles))
        if fill and k.alu_chain > 1.0:      # the first blocks' chains, not yet overlapped by others
            compute_done = max(compute_done, now + k.alu_chain * compute_s / ntiles)
        body_end = max(mem_done, compute_done)
        end = body_end + latency
        body = body_end - now
        component = k.data if mem_done >= compute_done else self.compute_component(k)
        return end, {Component.KERNEL_OVERHEAD: latency, component: body}

    def compute_component(self, k: Kernel) -> Component:
        """A compute-bound attention tile is charged to dequantization when unpacking its KV is
        its longest pipe (other kernels' integer work is address arithmetic, not unpacking)."""
        if (k.int_ops or k.decoder_elements) and k.data is Component.KV_READ:
            sms = self.sms
            dequant = sms.compute_time(0, 0, self.int_ops(k), k.dtype, k.decoder_elements)
            if dequant >= sms.compute_time(k.tensor_flops, k.vector_flops, 0, k.dtype, 0.0, k.mma_sync, k.tensor_share):
                return Component.DEQUANT
        return k.compute

    def waves(self, k: Kernel):
        """The kernel's waves as (tiles_per_sm, first_tile, tiles_in_wave, fill) tuples."""
        if k.busiest_tiles:   # unequal tiles, dispatched as SMs free: one pass, the busiest SM's share
            yield k.busiest_tiles, 0, k.tiles, True
            return
        if k.balanced:   # stream-K: every SM gets tiles/sms tiles' worth of work, in one pass
            yield k.tiles / self.chip.sms, 0, k.tiles, True
            return
        slots = self.chip.sms * self.slots_per_sm(k)
        done = 0
        while done < k.tiles:
            in_wave = min(slots, k.tiles - done)
            active = min(self.chip.sms, in_wave)
            yield math.ceil(in_wave / active), done, in_wave, done == 0
            done += in_wave

    def wave_count(self, k: Kernel) -> int:
        if k.busiest_tiles:
            return 1
        return math.ceil(k.tiles / (self.chip.sms * self.slots_per_sm(k)))
