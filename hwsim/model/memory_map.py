"""Where tensors live in HBM: a bump allocator, so addresses (and channel mapping) are stable."""

from __future__ import annotations

ALIGN = 2 * 2**20   # 2 MiB pages, as the CUDA caching allocator rounds large blocks


class MemoryMap:
    def __init__(self):
        self._next = 0
        self.regions: dict[str, tuple[int, float]] = {}

    def copy(self) -> "MemoryMap":
        new = MemoryMap()
        new._next, new.regions = self._next, dict(self.regions)
        return new

    def place_all(self, prefix: str, regions: list[tuple[str, float, int]]) -> None:
        """place() of each (prefix + name, bytes) in turn, given each one's aligned size
        (aligned()), in one loop: a MoE model's weights are tens of thousands of regions, laid
        out by every Schedule (Qwen3-30B-A3B: 12,000)."""
        placed, next_ = self.regions, self._next
        for name, nbytes, size in regions:
            name = prefix + name
            if name not in placed:
                placed[name] = (next_, nbytes)
                next_ += size
        self._next = next_

    def place(self, name: str, nbytes: float) -> int:
        """Address of `name`, allocating it on first use."""
        region = self.regions.get(name)
        if region is None:
            region = (self._next, nbytes)
            self.regions[name] = region
            self._next += aligned(nbytes)
        return region[0]


def aligned(nbytes: float) -> int:
    """What a region of `nbytes` takes of the address space."""
    return -(-int(nbytes) // ALIGN) * ALIGN

