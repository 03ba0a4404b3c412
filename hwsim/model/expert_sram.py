"""SRAM-resident experts: which experts' weights sit on chip between uses.

Policies, one class each, by the name `moe.cache.policy` chooses (`cache_policy`):
- `none`: nothing stays; every expert GEMM streams its weights from HBM (with prefetch on,
  the SRAM is a staging buffer that holds only prefetched experts, oldest evicted first);
- `lru` / `lfu`: an expert used (or prefetched) is kept, evicting the least recently /
  least frequently used ones until it fits;
- `pinned-hot`: the most popular experts are pinned once, up front, and never evicted.
On use, only whole experts are admitted (one larger than the capacity never is); a
prefetch may stage just the first part of an expert (see hwsim.model.moe_dispatch).
Keys are (layer, expert); sizes are bytes of gate+up+down weights.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import ClassVar


class CachePolicy:
    """How an expert cache keeps experts: LRU order, admitting what it uses."""
    name: ClassVar[str] = "lru"
    keeps: ClassVar[bool] = True          # experts stay on chip between uses (none: the SRAM is
                                          # only prefetch's staging buffer, used when prefetch is on)
    admit_on_use: ClassVar[bool] = True   # an expert used is kept (else only prefetched or pinned ones)
    pins_hot: ClassVar[bool] = False      # the most popular experts are pinned up front

    @staticmethod
    def victim(cache: "ExpertCache", candidates: list[tuple[int, int]]) -> tuple[int, int]:
        return candidates[0]              # least recently used


class NoCache(CachePolicy):
    name, keeps, admit_on_use = "none", False, False


class LfuPolicy(CachePolicy):
    name = "lfu"

    @staticmethod
    def victim(cache: "ExpertCache", candidates: list[tuple[int, int]]) -> tuple[int, int]:
        return min(candidates, key=lambda k: cache.uses.get(k, 0))


class PinnedHot(CachePolicy):
    name, admit_on_use, pins_hot = "pinned-hot", False, True


CACHE_POLICIES: dict[str, type[CachePolicy]] = {p.name: p for p in (NoCache, CachePolicy, LfuPolicy, PinnedHot)}


def cache_policy(name: str) -> type[CachePolicy]:
    """The policy `moe.cache.policy` names."""
    return CACHE_POLICIES[name]


class ExpertCache:
    def __init__(self, policy: type[CachePolicy], capacity_bytes: float):
        self.policy = policy
        self.capacity = capacity_bytes
        self.admit_on_use = policy.admit_on_use
        self.used = 0.0
        self.resident: OrderedDict[tuple[int, int], float] = OrderedDict()   # LRU order: oldest first
        self.uses: dict[tuple[int, int], int] = {}
        self.pinned: set[tuple[int, int]] = set()
        self.hits = 0
        self.lookups = 0
        self.hits_by_layer: dict[int, list[int]] = {}

    def is_resident(self, key: tuple[int, int]) -> bool:
        return key in self.resident

    def lookup(self, key: tuple[int, int], size: float) -> bool:
        """An expert GEMM is about to run: count the hit or miss and update the policy."""
        hit = key in self.resident
        self.lookups += 1
        self.hits += hit
        per = self.hits_by_layer.setdefault(key[0], [0, 0])
        per[0] += hit
        per[1] += 1
        self.uses[key] = self.uses.get(key, 0) + 1
        if hit:
            self.resident.move_to_end(key)
        elif self.admit_on_use:
            self.admit(key, size)
        return hit

    def count_misses(self, layer: int, experts: list[int]) -> None:
        """lookup() of each of `experts` of `layer`, known to miss and not to be admitted."""
        n = len(experts)
        self.lookups += n
        self.hits_by_layer.setdefault(layer, [0, 0])[1] += n
        uses = self.uses
        for e in experts:
            key = (layer, e)
            uses[key] = uses.get(key, 0) + 1

    def admit(self, key: tuple[int, int], size: float) -> bool:
        """Make `key` resident, evicting per the policy; False if it cannot fit."""
        if key in self.resident:
            self.resident.move_to_end(key)
            return True
        if size > self.capacity:
            return False
        while self.used + size > self.capacity:
            victim = self._victim()
            if victim is None:
                return False
            self.used -= self.resident.pop(victim)
        self.resident[key] = size
        self.used += size
        return True

    def pin(self, key: tuple[int, int], size: float) -> bool:
        if self.admit(key, size):
            self.pinned.add(key)
            return True
        return False

    def _victim(self):
        candidates = [k for k in self.resident if k not in self.pinned]
        if not candidates:
            return None
        return self.policy.victim(self, candidates)


def pooled_hit_rates(caches: list[ExpertCache]) -> tuple[float | None, dict[int, float]]:
    """The hit rate and hit rate by layer of one GPU's cache, or of several GPUs' caches
    together (expert parallelism: each GPU looks up the experts it holds)."""
    hits = sum(c.hits for c in caches)
    lookups = sum(c.lookups for c in caches)
    by_layer: dict[int, list[int]] = {}
    for c in caches:
        for layer, (h, n) in c.hits_by_layer.items():
            both = by_layer.setdefault(layer, [0, 0])
            both[0] += h
            both[1] += n
    return (hits / lookups if lookups else None,
            {layer: h / n for layer, (h, n) in sorted(by_layer.items()) if n})
