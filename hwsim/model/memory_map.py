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

    def place(self, name: str, nbytes: float) -> int:
        """Address of `name`, allocating it on first use."""
        region = self.regions.get(name)
        if region is None:
            region = (self._next, nbytes)
            self.regions[name] = region
            self._next += -(-int(nbytes) // ALIGN) * ALIGN
        return region[0]

