"""One seed, many streams: each purpose draws from its own numpy Generator.

Streams are spawned from one SeedSequence keyed by a stable name, so adding a new random
purpose (or changing how much one stream draws) never reshuffles the others.
"""

from __future__ import annotations

import zlib

import numpy as np


class RandomStreams:
    def __init__(self, seed: int):
        self.seed = seed
        self._streams: dict[str, np.random.Generator] = {}

    def get(self, purpose: str) -> np.random.Generator:
        if purpose not in self._streams:
            key = zlib.crc32(purpose.encode())
            self._streams[purpose] = np.random.default_rng(np.random.SeedSequence([self.seed, key]))
        return self._streams[purpose]
