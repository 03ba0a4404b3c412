"""Routing: which experts each token visits in each MoE layer, step after step.
Policies by name (`moe.routing.kind`):
- `uniform`: top-k distinct experts uniformly at random (the measured schedule);
- `zipf`: expert popularity ~ 1/rank^exponent over a per-layer ranking of "hot" experts; the
  ranking persists for `hot_persist_steps` steps, then a `drift` share of it is reshuffled;
- `trace`: replay a CSV of router decisions (step, layer, token, experts).
`balance` (0..1) mixes the popularity with uniform, as an auxiliary balancing loss or
DeepSeek's bias-based balancing flattens skew. A capacity factor caps each expert's tokens;
overflow is dropped or re-routed to the least-loaded expert the token did not pick.
"""

from __future__ import annotations

import csv
import math
from enum import Enum
from pathlib import Path

import numpy as np

from hwsim.config.scenario import TraceRouting, UniformRouting, ZipfRouting
from hwsim.errors import ConfigError
from hwsim.io.bounded import LIMITS, open_text
from hwsim.model.shapes import Moe


class Overflow(Enum):
    """`moe.routing.overflow`: a token's choice of an expert already at capacity."""
    DROP = "drop"           # skips that expert
    REROUTE = "reroute"     # goes to the least-loaded expert with room it did not choose


def uniform_topk(rng: np.random.Generator, tokens: int, moe: Moe) -> np.ndarray:
    """[tokens, top_k] distinct expert ids per token, uniformly at random (the measured
    schedule), each token's in ascending order. The k lowest of uniform scores: found as those
    at most the k-th lowest (np.partition), which is half the cost of np.argpartition, whose
    index shuffle is slow; a tie at the k-th score (chance ~1e-14) falls back to it."""
    k = moe.top_k
    scores = rng.random((tokens, moe.experts))
    chosen = scores <= np.partition(scores, k - 1, axis=1)[:, k - 1:k]
    experts = np.nonzero(chosen)[1]
    if experts.size != tokens * k:
        return np.sort(np.argpartition(scores, k - 1, axis=1)[:, :k], axis=1)
    return experts.reshape(tokens, k)


def uniform_topk_counts(rng: np.random.Generator, tokens: int, moe: Moe, layers: int) -> np.ndarray:
    """[layers, experts] tokens per expert of `tokens` uniform top-k draws in each layer, drawn
    directly (issue 33): the same distribution as counting uniform_topk's choices, without a
    score per (token, expert). Each token's k experts are a uniform k-subset, which is each
    expert in turn joining it with probability (picks it has left) / (experts left); tokens
    are independent, so the tokens with r picks left that take expert j are
    Binomial(tokens with r left, r / experts left): one draw per (layer, r) per expert."""
    k, experts = moe.top_k, moe.experts
    left = np.zeros((layers, k + 1), dtype=np.int64)       # tokens by picks left, per layer
    left[:, k] = tokens
    have, less = left[:, 1:], left[:, :-1]                 # views: tokens with r >= 1 left, and r - 1
    # every expert's chance for each r (r > experts left: certain), worked out in one go; the
    # draws go one expert at a time (each reads the tokens the ones before left) and are summed
    # over r at the end (integers: the same counts as summing each draw)
    chance = np.minimum(np.arange(1, k + 1) / (experts - np.arange(experts))[:, None], 1.0)
    took = np.empty((experts, layers, k), dtype=np.int64)
    for j in range(experts):
        drawn = took[j] = rng.binomial(have, chance[j])
        have -= drawn
        less += drawn
    return np.ascontiguousarray(took.sum(axis=2).T)


class Assignments(np.ndarray):
    """assignments()' array, which keeps the per-expert counts it was made of (`counts`):
    tokens_per_expert and experts_chosen take them instead of counting the array back (every
    MoE layer of every pass). A view or a slice of it is a plain array of ids (no `counts`)."""


def assignments(counts: np.ndarray, top_k: int) -> np.ndarray:
    """Expert ids of every (token, expert) assignment, in rows of top_k: what tokens_per_expert
    and experts_chosen read back as `counts`. Rows are not tokens (an expert can repeat in a
    row): for consumers of per-expert counts only (one GPU's schedule, serving shapes)."""
    out = np.repeat(np.arange(len(counts)), counts).reshape(-1, top_k).view(Assignments)
    out.counts = counts
    return out


def _kept_counts(choice: np.ndarray):
    """The counts an Assignments was made of (read-only), or None."""
    return choice.__dict__.get("counts") if type(choice) is Assignments else None


def weighted_topk(rng: np.random.Generator, tokens: int, k: int, probs: np.ndarray,
                  groups: int = 1, topk_groups: int = 1) -> np.ndarray:
    """k distinct experts per token drawn without replacement with probabilities `probs`
    (Gumbel top-k: argsort of log p + Gumbel noise). With group-limited routing (DeepSeek),
    each token first keeps its `topk_groups` best groups of experts, then picks within them."""
    keys = np.log(probs)[None, :] + rng.gumbel(size=(tokens, len(probs)))
    if groups > 1 and topk_groups < groups:
        per = len(probs) // groups
        grouped = keys.reshape(tokens, groups, per)
        # a group's score is the sum of its two best experts' keys (DeepSeek-V3's rule)
        best2 = np.sort(grouped, axis=2)[:, :, -2:].sum(axis=2)
        drop = np.argsort(best2, axis=1)[:, : groups - topk_groups]
        mask = np.zeros((tokens, groups), dtype=bool)
        np.put_along_axis(mask, drop, True, axis=1)
        keys = np.where(np.repeat(mask, per, axis=1), -np.inf, keys)
    return np.argpartition(-keys, k - 1, axis=1)[:, :k]


def expected_distinct(experts: int, k: int, tokens: int) -> float:
    """E[distinct experts] for `tokens` uniform top-k draws: E (1 - (1 - k/E)^tokens)."""
    return experts * (1 - (1 - k / experts) ** tokens)


class Router:
    """Draws routing for every MoE layer of every step; keeps the state skew needs."""

    def __init__(self, cfg, moe: Moe, layers: list[int], rng: np.random.Generator):
        self.cfg = cfg                    # hwsim.config.scenario.Routing
        self.moe = moe
        self.layers = layers
        self.rng = rng
        self._ranking = {layer: rng.permutation(moe.experts) for layer in layers}
        self._steps_since_drift = 0
        self._trace = load_trace(Path(cfg.trace), moe.experts, moe.top_k) if isinstance(cfg, TraceRouting) else None

    def popularity(self, layer: int) -> np.ndarray:
        """Per-expert probability weights of this layer (before top-k without replacement)."""
        e = self.moe.experts
        if isinstance(self.cfg, UniformRouting):
            return np.full(e, 1.0 / e)
        ranks = np.empty(e)
        ranks[self._ranking[layer]] = np.arange(1, e + 1)
        zipf = ranks ** -self.cfg.zipf_exponent
        zipf /= zipf.sum()
        b = self.cfg.balance
        return (1 - b) * zipf + b / e

    def step(self, step: int, tokens: int, counts_only: bool = False) -> dict[int, np.ndarray]:
        """{layer: [tokens, top_k] expert ids} for one forward pass. `counts_only`: the caller
        reads per-expert counts only (one GPU's schedule); where routing is uniform, ungrouped
        and uncapped they are drawn directly (uniform_topk_counts; another random stream, the
        same statistics) and returned as assignments()."""
        if counts_only and isinstance(self.cfg, UniformRouting) and self.cfg.capacity_factor is None \
                and not (self.moe.groups > 1 and self.moe.topk_groups < self.moe.groups):
            counts = uniform_topk_counts(self.rng, tokens, self.moe, len(self.layers))
            return {layer: assignments(c, self.moe.top_k) for layer, c in zip(self.layers, counts)}
        if self._trace is not None:
            out = {}
            for layer in self.layers:
                out[layer] = self._trace_choice(step, layer, tokens)
            return out
        if isinstance(self.cfg, ZipfRouting):
            self._maybe_drift()
        out = {}
        grouped = self.moe.groups > 1 and self.moe.topk_groups < self.moe.groups
        for layer in self.layers:
            if isinstance(self.cfg, UniformRouting) and not grouped:
                choice = uniform_topk(self.rng, tokens, self.moe)
            else:
                choice = weighted_topk(self.rng, tokens, self.moe.top_k, self.popularity(layer),
                                       self.moe.groups, self.moe.topk_groups)
            out[layer] = self._cap(choice)
        return out

    def _maybe_drift(self):
        self._steps_since_drift += 1
        if self._steps_since_drift <= self.cfg.hot_persist_steps:
            return
        self._steps_since_drift = 1
        n = max(2, round(self.cfg.drift * self.moe.experts)) if self.cfg.drift > 0 else 0
        for layer in self.layers:
            if n:
                order = self._ranking[layer]
                pos = self.rng.choice(len(order), size=min(n, len(order)), replace=False)
                order[pos] = order[self.rng.permutation(pos)]

    def _trace_choice(self, step: int, layer: int, tokens: int) -> np.ndarray:
        table = self._trace
        steps = sorted({s for s, _ in table})
        s = steps[step % len(steps)]          # a short trace is replayed cyclically
        rows = table.get((s, layer))
        if rows is None:                      # a layer the trace omits: uniform
            return uniform_topk(self.rng, tokens, self.moe)
        idx = np.arange(tokens) % len(rows)
        return self._cap(np.asarray(rows)[idx])

    def _cap(self, choice: np.ndarray) -> np.ndarray:
        """Apply the capacity factor: tokens over an expert's cap are dropped (-1) or re-routed."""
        cf = self.cfg.capacity_factor
        if cf is None:
            return choice
        tokens, k = choice.shape
        cap = max(1, math.ceil(cf * tokens * k / self.moe.experts))
        load = np.zeros(self.moe.experts, dtype=int)
        out = choice.copy()
        drop = Overflow(self.cfg.overflow) is Overflow.DROP
        for t in range(tokens):
            for j in range(k):
                e = out[t, j]
                if load[e] < cap:
                    load[e] += 1
                    continue
                if drop:
                    out[t, j] = -1
                    continue
                taken = set(out[t].tolist())
                free = [x for x in np.argsort(load, kind="stable") if x not in taken and load[x] < cap]
                if free:
                    out[t, j] = free[0]
                    load[free[0]] += 1
                else:
                    out[t, j] = -1
        return out


def experts_chosen(choice: np.ndarray) -> int:
    """How many distinct experts a layer's tokens chose (dropped assignments, -1, aside):
    np.unique's count without its sort, for every layer of every pass."""
    counts = _kept_counts(choice)
    if counts is not None:
        return int(np.count_nonzero(counts))
    return int(np.count_nonzero(np.bincount(choice[choice >= 0].ravel())))


def tokens_per_expert(choice: np.ndarray, experts: int) -> np.ndarray:
    """Tokens routed to each expert; dropped assignments (-1) are not counted."""
    counts = _kept_counts(choice)
    if counts is not None and len(counts) == experts:
        return counts
    kept = choice[choice >= 0]
    return np.bincount(kept.ravel(), minlength=experts)


def load_trace(path: Path, experts: int, top_k: int) -> dict[tuple[int, int], list[list[int]]]:
    """A router log: CSV with columns step, layer, token, experts (ids separated by spaces or ';')."""
    table: dict[tuple[int, int], list[list[int]]] = {}
    with open_text(path, LIMITS["routing trace"], key="moe.routing.trace", newline="") as fh:
        reader = csv.DictReader(fh)
        try:
            _read_rows(reader, path, experts, top_k, table)
        except csv.Error as exc:      # a NUL byte, an unclosed quote
            raise ConfigError(f"malformed CSV: {exc}", file=str(path), line=reader.line_num,
                              key="moe.routing.trace") from None
    if not table:
        raise ConfigError("routing trace has no rows", file=str(path), line=1, key="moe.routing.trace")
    return table


def _read_rows(reader, path: Path, experts: int, top_k: int, table: dict) -> None:
    """The rows of a routing trace into `table` ((step, layer) -> each token's expert ids)."""
    missing = {"step", "layer", "token", "experts"} - set(reader.fieldnames or [])
    if missing:
        raise ConfigError(f"routing trace lacks column(s) {sorted(missing)}", file=str(path), line=1,
                          key="moe.routing.trace")
    for line, row in enumerate(reader, start=2):
        try:
            step, layer = int(row["step"]), int(row["layer"])
            ids = [int(x) for x in row["experts"].replace(";", " ").split()]
        except (TypeError, ValueError, AttributeError):
            raise ConfigError("step, layer and experts must be integers", file=str(path), line=line,
                              key="moe.routing.trace") from None
        bad = [i for i in ids if not 0 <= i < experts]
        if bad:
            raise ConfigError(f"expert id {bad[0]} out of range 0..{experts - 1}", file=str(path), line=line,
                              key="moe.routing.trace")
        if len(ids) != top_k or len(set(ids)) != top_k:
            raise ConfigError(f"expected {top_k} distinct expert ids, got {ids}", file=str(path), line=line,
                              key="moe.routing.trace")
        table.setdefault((step, layer), []).append(ids)

