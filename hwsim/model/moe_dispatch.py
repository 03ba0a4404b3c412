"""Expert dispatch: where each routed expert's weights come from, and when.

For every MoE layer of a step it decides, in program order:
- which experts to pre-dispatch into on-chip SRAM while the layer's attention runs
  (`moe.prefetch`), returning a PrefetchLoad for the stream to start;
- for each expert the tokens chose: read its weights from SRAM (resident in the expert
  cache, or prefetched, after waiting for the copy to land) or stream them from HBM;
- which HBM stack holds an expert's weights (`moe.placement`).
It also keeps the statistics a user asks about: hit rates, prefetch precision and recall,
wasted prefetch bytes, active-parameter fraction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from functools import reduce
from itertools import repeat
from operator import add

import numpy as np

from hwsim.model.kernel import AwaitLoad, PrefetchLoad
from hwsim.model.expert_sram import ExpertCache, cache_policy
from hwsim.workload.predictor import predict


class Placement(Enum):
    """`moe.placement`: where an expert's weights sit in HBM."""
    INTERLEAVED = "interleaved"     # over every stack, as any tensor
    PER_EXPERT = "per-expert"       # contiguous on one stack


@dataclass(slots=True)
class ExpertPlan:
    on_chip: float          # share of the expert's weight bytes read from SRAM (0..1)
    channel_group: int
    wait: AwaitLoad | None


FROM_HBM = ExpertPlan(0.0, -1, None)     # an expert streamed from HBM, over every stack (never changed)


@dataclass
class DispatchStats:
    predicted: int = 0
    predicted_needed: int = 0
    needed: int = 0
    wasted_bytes: float = 0.0
    prefetched_bytes: float = 0.0
    stack_bytes: dict[tuple[int, int], list[float]] = field(default_factory=dict)  # (step, layer) -> per stack


class ExpertDispatch:
    def __init__(self, cfg, model, expert_bytes: float, capacity_bytes: float, stacks: int,
                 address_of, rng: np.random.Generator):
        self.cfg = cfg                      # hwsim.config.scenario.Moe
        self.model = model
        self.expert_bytes = expert_bytes
        self.stacks = stacks
        self.address_of = address_of        # (layer, expert) -> HBM address of its gate_up weights
        self.rng = rng
        self.per_expert = Placement(cfg.placement) is Placement.PER_EXPERT
        policy = cache_policy(cfg.cache.policy)
        # policy none: the SRAM holds only what prefetch stages there, oldest evicted first
        self.cache = ExpertCache(policy, capacity_bytes if policy.keeps or cfg.prefetch.enabled else 0.0)
        self.stats = DispatchStats()
        self._in_flight: set[tuple[int, int]] = set()
        self._previous_step: dict[int, set[int]] = {}
        self._this_step: dict[int, set[int]] = {}
        self._step = 0

    def channel_group(self, layer: int, expert: int) -> int:
        """per-expert placement: an expert's weights sit contiguously on one HBM stack."""
        if not self.per_expert:
            return -1
        return (layer * self.model.moe.experts + expert) % self.stacks

    def pin_hot(self, popularity_of, holds=None) -> None:
        """pinned-hot: pin the most popular experts, hottest first across layers, until SRAM is
        full; of those this GPU holds (`holds(layer, expert)`; None: all, one GPU holds them all)."""
        ranked = []
        for layer in range(self.model.layers):
            if self.model.is_moe_layer(layer):
                pop = popularity_of(layer)
                ranked += [(-pop[e], layer, e) for e in range(len(pop))
                           if holds is None or holds(layer, e)]
        for _, layer, e in sorted(ranked):
            if not self.cache.pin((layer, e), self.expert_bytes):
                break

    def begin_step(self) -> None:
        self._previous_step, self._this_step = self._this_step, {}
        self._step += 1

    def prefetch_for(self, layer: int, routing: dict[int, np.ndarray]) -> PrefetchLoad | None:
        """At the start of `layer`'s attention: the experts to copy into SRAM for it (and l+1)."""
        p = self.cfg.prefetch
        if not p.enabled:
            return None
        loads = []
        for target in range(layer, min(layer + p.lookahead_layers + 1, self.model.layers)):
            if target not in routing or (target, -1) in self._in_flight:
                continue
            self._in_flight.add((target, -1))          # each target layer is predicted once a step
            needed = set(np.unique(routing[target][routing[target] >= 0]).tolist())
            previous_layer = self._used(target - 1, routing)
            guess = predict(p.predictor, needed, self.model.moe.experts, self.rng, p.accuracy,
                            previous_layer, self._previous_step.get(target))
            self.stats.predicted += len(guess)
            self.stats.needed += len(needed)
            self.stats.predicted_needed += len(guess & needed)
            # experts larger than their share of SRAM are staged in part: their first bytes
            share = min(self.expert_bytes, self.cache.capacity / max(1, len(guess)))
            for e in sorted(guess):
                key = (target, e)
                if self.cache.is_resident(key) or key in self._in_flight or share <= 0:
                    continue
                if not self.cache.admit(key, share):
                    continue
                self._in_flight.add(key)
                self.stats.prefetched_bytes += share
                if e not in needed:
                    self.stats.wasted_bytes += share
                loads.append((key, self.address_of(target, e), share, self.channel_group(target, e)))
        if not loads:
            return None
        return PrefetchLoad(f"L{layer}.prefetch", layer, tuple(loads))

    def _used(self, layer: int, routing: dict[int, np.ndarray]) -> set[int] | None:
        if layer not in routing:
            return None
        r = routing[layer]
        return set(np.unique(r[r >= 0]).tolist())

    def plan_layer(self, layer: int, experts: list[int]) -> list[ExpertPlan]:
        """plan() for each of a layer's routed experts, in order (a batch-64 pass plans
        thousands). While nothing is or can become resident on chip and no copy is in flight
        (no expert SRAM: the measured schedule), every expert streams from HBM."""
        cache = self.cache
        if cache.resident or cache.admit_on_use or self._in_flight:
            return [self.plan(layer, e) for e in experts]
        self._this_step.setdefault(layer, set()).update(experts)
        cache.count_misses(layer, experts)
        if not self.per_expert:
            return [FROM_HBM] * len(experts)
        return [ExpertPlan(0.0, self.channel_group(layer, e), None) for e in experts]

    def plan(self, layer: int, expert: int) -> ExpertPlan:
        """Where expert `expert` of `layer` reads its weights from in this step."""
        key = (layer, expert)
        self._this_step.setdefault(layer, set()).add(expert)
        group = self.channel_group(layer, expert)
        on_chip = self._fraction(key)          # before the lookup: a miss admits the expert after use
        self.cache.lookup(key, self.expert_bytes)
        if key in self._in_flight:
            self._in_flight.discard(key)
            return ExpertPlan(on_chip, group, AwaitLoad(key))
        return ExpertPlan(on_chip, group, None)

    def _fraction(self, key) -> float:
        return min(1.0, self.cache.resident.get(key, 0.0) / self.expert_bytes)

    def account(self, layer: int, plans: list[ExpertPlan]) -> None:
        """The expert weight bytes a layer's plans stream from HBM, per stack (for hot-spot
        statistics): an expert placed on one stack reads from it, any other from all alike."""
        per = self.stats.stack_bytes.get((self._step, layer))
        if per is None:
            per = self.stats.stack_bytes[self._step, layer] = [0.0] * self.stacks
        stacks = range(self.stacks)
        if plans.count(FROM_HBM) == len(plans):   # every expert from HBM, over every stack (the
            # measured schedule): each stack adds the same share once per expert, in order; a
            # C loop of the same adds (not sum(): 3.12 compensates its float sums)
            share = self.expert_bytes * (1.0 - FROM_HBM.on_chip) / self.stacks
            for s in stacks:
                per[s] = reduce(add, repeat(share, len(plans)), per[s])
            return
        for plan in plans:                     # floats, not an array: one add is a Python call
            hbm_bytes = self.expert_bytes * (1.0 - plan.on_chip)
            if plan.channel_group >= 0:
                per[plan.channel_group] += hbm_bytes
            else:
                share = hbm_bytes / self.stacks
                for s in stacks:
                    per[s] += share

    def expert_stack_imbalance(self) -> float:
        """Mean over layers and steps of max/mean expert bytes per HBM stack (1.0 = even)."""
        per_stack = [np.array(v) for v in self.stats.stack_bytes.values()]
        ratios = [v.max() / v.mean() for v in per_stack if v.mean() > 0]
        return float(np.mean(ratios)) if ratios else 1.0

    def planned(self) -> tuple:
        """What making plans left here (lookups, statistics, the steps' experts), copied: a run
        that replays kept plans restores it (hwsim/run.py), so that its summary is the one its
        own planning would give. Plans are kept only while nothing is resident on chip
        (hwsim/whatif/reuse.py), so this is all that planning changes."""
        c = self.cache
        return _copied((c.lookups, c.hits, c.hits_by_layer, c.uses, self.stats,
                        self._previous_step, self._this_step, self._step))

    def restore(self, planned: tuple) -> None:
        c = self.cache
        (c.lookups, c.hits, c.hits_by_layer, c.uses, self.stats,
         self._previous_step, self._this_step, self._step) = _copied(planned)

    def end_step(self) -> None:
        # every copy has landed once the step's simulation drains; wrong guesses stay resident
        self._in_flight.clear()


def _copied(state: tuple) -> tuple:
    """planned()'s state, its containers copied (their items are numbers, immutable): a tenth
    of copy.deepcopy's time, which took 14% of a replayed sweep point."""
    lookups, hits, hits_by_layer, uses, stats, previous, this, step = state
    return (lookups, hits, {k: list(v) for k, v in hits_by_layer.items()}, dict(uses),
            replace(stats, stack_bytes={k: list(v) for k, v in stats.stack_bytes.items()}),
            {k: set(v) for k, v in previous.items()}, {k: set(v) for k, v in this.items()}, step)
