"""SRAM-resident experts: which experts' weights sit on chip between uses.

Policies by name (`moe.cache.policy`):
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


class ExpertCache:
    def __init__(self, policy: str, capacity_bytes: float, admit_on_use: bool | None = None):
        self.policy = policy
        self.capacity = capacity_bytes
        # lru/lfu keep what they just used; a prefetch-only buffer (policy none) keeps only
        # what was prefetched into it
        self.admit_on_use = policy in ("lru", "lfu") if admit_on_use is None else admit_on_use
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
        if self.policy == "lfu":
            return min(candidates, key=lambda k: self.uses.get(k, 0))
        return candidates[0]


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
