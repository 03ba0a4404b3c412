"""A FIFO server's and a bank of servers' service of a batch of requests in numpy: Lindley's
recursion as a cumulative maximum (the memory levels, hwsim/hw/levels.py, and the tile rounds,
hwsim/engine/tile_rounds.py, serve their requests through these)."""

from __future__ import annotations

import numpy as np

NEVER = -np.inf


def lindley(arrivals: np.ndarray, service: np.ndarray, free_at) -> np.ndarray:
    """Departures of FIFO servers for requests sorted by arrival: service is [n] (one server,
    free_at a float) or [n, servers] (a bank, free_at [servers]; zero entries are no request)."""
    done = np.cumsum(service, axis=0)
    if arrivals[0] == arrivals[-1]:      # all at once (a kernel's first round): no waiting between
        return done + np.maximum(free_at, arrivals[0])
    before = done - service
    a = arrivals if service.ndim == 1 else arrivals[:, None]
    return done + np.maximum(free_at, np.maximum.accumulate(a - before, axis=0))


def serve_single(server, arrivals: np.ndarray, units: float) -> np.ndarray:
    """Each request (sorted by arrival) puts `units` on one Server; returns their departures."""
    if units <= 0:
        return arrivals
    service = np.full(len(arrivals), units / server.rate)
    done = lindley(arrivals, service, server.free_at)
    server.free_at = max(server.free_at, float(done[-1]))
    server.busy_s += float(service.sum())
    server.units += units * len(arrivals)
    return done


def serve_bank(bank, arrivals: np.ndarray, units: np.ndarray, rate_scale: float = 1.0,
               lo: int = 0, every: bool = False) -> np.ndarray:
    """units[i, c]: what request i puts on server lo + c of a ServerBank; returns each
    request's last departure (its arrival where it put nothing anywhere). `every`: each
    request uses every one of those servers (a long contiguous range), so no masking."""
    width = units.shape[1]
    free = bank.free_at[lo:lo + width]
    service = units / (bank.rate * rate_scale)
    done = lindley(arrivals, service, free)
    if every:
        free[:] = done[-1]
        last = done.max(axis=1)
    else:
        used = service > 0
        done_used = np.where(used, done, NEVER)
        free[:] = np.maximum(free, done_used.max(axis=0))
        last = np.maximum(arrivals, done_used.max(axis=1))
    bank.busy_s[lo:lo + width] += service.sum(axis=0)
    bank.units[lo:lo + width] += units.sum(axis=0)
    bank.last_free = max(bank.last_free, float(free.max()))
    return last


def serve_bank_together(bank, arrival: float, first: np.ndarray, full_rounds: int, rest: int,
                        granule_units: float, lo: int, width: int, rate_scale: float = 1.0) -> np.ndarray | None:
    """serve_bank for n requests arriving together at servers lo..lo+width that are all idle by
    then, each putting `full_rounds` granules on every server and one more on the `rest`
    servers from its `first` on (Hbm.spread's pattern), without the [n, width] matrix.

    Request i ends when its busiest server has served, in FIFO order, everything requests
    0..i put there: with depth(i, c) the number of requests <= i whose remainder covers c,
    it ends at arrival + g * (full_rounds * (i + 1) + depth), g one granule's service, the
    depth taken over every server when full_rounds > 0 and over its own remainder otherwise.
    Each (request, server) pair of the remainders is ranked among the pairs on its server in
    request order: that rank is the depth the server reaches with that request, so a
    request's own maximum rank is its own remainder's depth, and the running maximum of those
    is the depth over every server. Returns None when a server is still busy at `arrival`."""
    free = bank.free_at[lo:lo + width]
    if free.max() > arrival:
        return None
    n = len(first)
    g = granule_units / (bank.rate * rate_scale)
    own = np.zeros(n)
    counts = np.zeros(width)
    if rest:
        # request-major (request, server) pairs; 16-bit server ids make the stable sort a radix sort
        server = ((first.astype(np.int16)[:, None] + np.arange(rest, dtype=np.int16)) % width).ravel()
        order = np.argsort(server, kind="stable")        # by server, then request (FIFO)
        srv = server[order]
        idx = np.arange(len(order), dtype=np.int32)
        group_start = np.maximum.accumulate(np.where(np.concatenate(([True], srv[1:] != srv[:-1])), idx, 0))
        rank = np.empty(len(order))
        rank[order] = idx - group_start + 1
        own = rank.reshape(n, rest).max(axis=1)
        counts = np.bincount(server, minlength=width).astype(float)
    depth = np.maximum.accumulate(own) if full_rounds else own
    last = arrival + g * (full_rounds * np.arange(1, n + 1) + depth)
    per_server = n * full_rounds + counts                      # granules each server took
    touched = per_server > 0
    free[touched] = arrival + g * per_server[touched]
    bank.busy_s[lo:lo + width] += g * per_server
    bank.units[lo:lo + width] += granule_units * per_server
    bank.last_free = max(bank.last_free, float(free.max()))
    return last


def hbm_spread(first: np.ndarray, width: int, granules: int, nbytes: float) -> tuple[np.ndarray, bool]:
    """Bytes each request puts on each channel of its range (Hbm.spread for many ranges of
    the same length, `first` their starting channels within the range): ([n, width], whether
    every request uses every channel of it)."""
    n = len(first)
    full_rounds, rest = divmod(granules, width)
    per = np.full((n, width), float(full_rounds))
    if rest:
        cols = (first[:, None] + np.arange(rest)) % width
        flat = (np.arange(n)[:, None] * width + cols).ravel()
        per.ravel()[:] += np.bincount(flat, minlength=n * width)
    return per * (nbytes / granules), full_rounds > 0


def tensor_pipes(free_at: np.ndarray, sm: np.ndarray, arrivals: np.ndarray, service: float) -> np.ndarray:
    """Each request (sorted by arrival) runs `service` seconds on its SM's tensor pipe, FIFO
    among the SM's requests; free_at [sms] is updated."""
    if service <= 0:
        return arrivals
    done = np.empty_like(arrivals)
    order = np.argsort(sm, kind="stable")            # by SM, then arrival (arrivals are sorted)
    sm_sorted = sm[order]
    pos = np.arange(len(order))
    new_group = np.concatenate(([True], sm_sorted[1:] != sm_sorted[:-1]))
    rank = pos - np.maximum.accumulate(np.where(new_group, pos, 0))
    for r in range(int(rank.max()) + 1):                # at most the SM's resident slots
        idx = order[rank == r]
        start = np.maximum(arrivals[idx], free_at[sm[idx]])
        done[idx] = free_at[sm[idx]] = start + service
    return done


def hbm_serve(hbm, arrivals: np.ndarray, addresses: np.ndarray, nbytes: float, stack: int,
               rate_scale: float) -> np.ndarray:
    """Each request's last channel departure for equal-length ranges at `addresses`: without
    a matrix when they arrive together at idle channels (a kernel's first round), else with."""
    lo, width, granules = hbm.layout(nbytes, stack)
    first = (addresses.astype(np.int64) // hbm.interleave) % width
    if arrivals[0] == arrivals[-1]:
        full_rounds, rest = divmod(granules, width)
        last = serve_bank_together(hbm.bank, float(arrivals[0]), first, full_rounds, rest,
                                   nbytes / granules, lo, width, rate_scale)
        if last is not None:
            return last
    spread, every = hbm_spread(first, width, granules, nbytes)
    return serve_bank(hbm.bank, arrivals, spread, rate_scale, lo, every)
