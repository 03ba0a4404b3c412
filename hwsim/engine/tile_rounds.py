"""`tile` fidelity without a SimPy process per block slot: every tile's memory and compute
events, resolved in numpy a round of tiles at a time.

The process version (KernelTimer._tile_processes) lets each block slot, as it frees, take the kernel's
next tile and queue that tile's bytes on its load pipe, the bus, the L2 and the HBM channels
its addresses map to, and its MMAs on its SM's tensor pipe. Tiles are therefore handed out in
the order slots free, and that is the order their requests reach the FIFO servers. Here the
next `slots` tiles go to the slots in the order they free (the earliest-free slot takes the
lowest tile), and each server's FIFO (Lindley) recursion runs over that round's requests in
arrival order as a cumulative maximum: d_i = S_i + max(free, max_j<=i (a_j - S_{j-1})), with
S the running sum of service times. Requests are thus served in arrival order within a round
and rounds in tile order; the one approximation against the process version is a slot that
frees before a later tile of the same round arrives, which the process version would give a
second tile of that round. Used whenever no expert copy shares the servers (a copy's requests
must interleave event by event, so the process version runs then).

Two shortcuts keep it cheap, both exact: a round whose tiles reach idle HBM channels together
is served without the [tiles x channels] matrix (hw/queues.py:serve_bank_together), and a kernel of a few
tiles, one per SM, is timed in plain arithmetic (_few_tiles).
"""

from __future__ import annotations

import numpy as np

from hwsim.hw.queues import tensor_pipes
from hwsim.metrics import Component
from hwsim.model.kernel import Kernel

SCALAR_TILES = 8     # kernels with at most this many tiles (units) skip numpy


def _few_tiles(path, k: Kernel, start: float, units: int, hbm_r: float, hbm_w: float, l2: float,
               sram: float, pipe_s: float, compute_s: float, latency: float,
               compute_component: Component) -> tuple[float, dict[Component, float], int]:
    """tile_rounds for a kernel of a few tiles: all start together on their own SMs (fewer
    tiles than SMs), each queued in turn on the memory path's levels (bus, L2, SRAM, its HBM
    channels)."""
    last_end, last_parts = -np.inf, None
    chain_s = path.chain_floor_s(k, 1)
    for unit in range(units):
        mem = max(start + pipe_s, path.memory_done(start, hbm_r, k.address + unit * hbm_r, hbm_w,
                                                   k.address + unit * hbm_w, l2, sram, k.channel_group))
        comp = start + max(compute_s * max(1.0, k.alu_chain), chain_s)     # alone on its SM: its own chain
        body_end = max(mem, comp)
        if body_end + latency > last_end:     # the first slot of the latest end, as np.argmax
            last_end = body_end + latency
            last_parts = (body_end - start, mem >= comp)
    body, memory_bound = last_parts
    chain = {Component.KERNEL_OVERHEAD: latency}
    component = k.data if memory_bound else compute_component
    if body:
        chain[component] = chain.get(component, 0.0) + body
    return last_end, chain, 2 * units


def tile_rounds(path, k: Kernel, start: float) -> tuple[float, dict[Component, float], int]:
    """Run kernel k's tiles from `start`; return its end (before the store drain), the
    critical path's attribution (the slot that finished last), and the events resolved: a
    memory and a compute event per tile."""
    chip, sms = path.chip, path.sms
    slots = chip.sms * path.slots_per_sm(k)
    units, per_unit = k.tiles, 1.0
    if k.balanced:   # stream-K: one equal share of the tiles per resident block slot
        units = min(slots, k.tiles)
        per_unit = k.tiles / units
    nslots = min(slots, units)
    hbm_r, hbm_w = k.hbm_read * per_unit, k.hbm_write * per_unit
    l2 = (k.l2_read + k.l2_write) * per_unit
    sram = k.sram_read * per_unit
    concurrent = min(k.tiles, slots) * per_unit                   # tiles in flight chip-wide
    pipe_s = sms.load_time(hbm_r, l2, k.hbm_read * concurrent, k.inflight_bytes)
    compute_s = per_unit * path.tile_compute_s(k)
    chain_s = path.chain_floor_s(k, per_unit)          # a latency-bound loop's tile: one whole chain
    first_latency = sms.trips_latency(k.hbm_read, k.miss_trips, k.round_trips + k.start_trips) + (
        chip.decoder_latency_s if k.decoder_elements else 0.0)
    later_latency = sms.trips_latency(k.hbm_read, k.miss_trips, k.round_trips - 1)
    compute_component = path.compute_component(k)

    if units <= SCALAR_TILES:   # one round of a few tiles, one per SM: plain arithmetic is cheaper
        return _few_tiles(path, k, start, units, hbm_r, hbm_w, l2, sram, pipe_s, compute_s,
                          first_latency, compute_component)
    slot_free = np.full(nslots, start)
    slot_sm = np.arange(nslots) % chip.sms
    fresh = np.ones(nslots, dtype=bool)
    overhead, data_body, compute_body = np.zeros(nslots), np.zeros(nslots), np.zeros(nslots)
    tensor_free = np.full(chip.sms, start)
    done_units = 0
    while done_units < units:
        n = min(nslots, units - done_units)
        order = np.argsort(slot_free, kind="stable")[:n]        # the earliest-free slots, in order
        a = slot_free[order]
        unit = done_units + np.arange(n)
        mem = _round_memory(path, k, a, unit, pipe_s, hbm_r, hbm_w, l2, sram)
        comp = tensor_pipes(tensor_free, slot_sm[order], a, compute_s)
        if k.alu_chain > 1.0:        # a fresh block's own chain, not yet overlapped by others
            comp = np.where(fresh[order], np.maximum(comp, a + k.alu_chain * compute_s), comp)
        if chain_s:
            comp = np.maximum(comp, a + chain_s)
        body_end = np.maximum(mem, comp)
        latency = np.where(fresh[order], first_latency, later_latency)
        body = body_end - a
        memory_bound = mem >= comp
        overhead[order] += latency
        data_body[order] += np.where(memory_bound, body, 0.0)
        compute_body[order] += np.where(memory_bound, 0.0, body)
        fresh[order] = False
        slot_free[order] = body_end + latency
        done_units += n
    last = int(np.argmax(slot_free))
    chain: dict[Component, float] = {Component.KERNEL_OVERHEAD: float(overhead[last])}
    for comp_, secs in ((k.data, data_body[last]), (compute_component, compute_body[last])):
        if secs:
            chain[comp_] = chain.get(comp_, 0.0) + float(secs)
    return float(slot_free[last]), chain, 2 * units


def _round_memory(path, k: Kernel, a: np.ndarray, unit: np.ndarray, pipe_s: float, hbm_r: float,
                  hbm_w: float, l2: float, sram: float) -> np.ndarray:
    """When each of a round's tiles, starting at `a`, has its bytes: the SM's load pipe, then
    the memory path's levels (bus, L2, SRAM, HBM) each serving the tiles in order."""
    mem = path.round_memory_done(a, hbm_r, k.address + unit * hbm_r if hbm_r else None, hbm_w,
                                 k.address + unit * hbm_w if hbm_w else None, l2, sram, k.channel_group)
    return np.maximum(a + pipe_s, mem)
