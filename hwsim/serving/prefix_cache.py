"""Prefix caching: KV blocks shared by requests whose prompts begin alike, as vLLM's automatic
prefix caching and Mooncake's store keep them.

A request names its prompt's KV blocks by hash (Mooncake traces: `hash_ids`, one per block of
BLOCK_TOKENS prompt tokens; equal ids are equal prefixes). A block can be reused once its
prefill has been computed (a request admitted beside another with the same prefix, before
that prefix is computed, computes its own, as vLLM does). A block stays resident while a
running request holds it, and once none does it stays as long as no admission needs its
memory (least recently released is evicted first). A request admitted with its first k blocks
resident skips their prefill: those prompt tokens are read from the cache, not computed (at
least one prompt token is always computed, to produce the first output token).
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK_TOKENS = 512          # Mooncake's trace: one hash id per 512-token block of the prompt


class PrefixCache:
    def __init__(self):
        self.refs: dict[int, int] = {}                       # resident block -> running holders
        self.ready: set[int] = set()                         # resident blocks whose KV is computed
        self.bytes: dict[int, float] = {}                    # resident block -> its KV bytes
        self.idle: OrderedDict[int, None] = OrderedDict()    # held by none: evictable, LRU first
        self.used = 0.0                                      # bytes of all resident blocks
        self.hit_tokens = 0
        self.prompt_tokens = 0

    def hits(self, hash_ids) -> int:
        """Leading blocks of a prompt that are resident and computed."""
        n = 0
        for h in hash_ids:
            if h not in self.ready:
                break
            n += 1
        return n

    def new_bytes(self, hash_ids, block_bytes: float) -> float:
        """Bytes the prompt's blocks that are not resident would add."""
        return sum(block_bytes for h in set(hash_ids) if h not in self.refs)

    def evictable_bytes(self, keep) -> float:
        return sum(self.bytes[h] for h in self.idle if h not in keep)

    def evict(self, need: float, keep) -> float:
        """Free at least `need` bytes of idle blocks (not those in `keep`), least recently
        released first; returns the bytes freed."""
        freed = 0.0
        for h in list(self.idle):
            if freed >= need:
                break
            if h in keep:
                continue
            del self.idle[h]
            del self.refs[h]
            self.ready.discard(h)
            freed += self.bytes.pop(h)
        self.used -= freed
        return freed

    def hold(self, hash_ids, block_bytes: float, prompt_tokens: int) -> int:
        """Admit a prompt's blocks; returns the prompt tokens its resident prefix saves."""
        hit = self.hits(hash_ids)
        for h in dict.fromkeys(hash_ids):
            if h in self.refs:
                self.refs[h] += 1
                self.idle.pop(h, None)
            else:
                self.refs[h] = 1
                self.bytes[h] = block_bytes
                self.used += block_bytes
        saved = min(hit * BLOCK_TOKENS, prompt_tokens - 1)
        self.hit_tokens += max(0, saved)
        self.prompt_tokens += prompt_tokens
        return max(0, saved)

    def computed(self, hash_ids, prompt_tokens_done: int) -> None:
        """The prompt's blocks whose tokens are all prefilled now can be reused."""
        self.ready.update(hash_ids[:prompt_tokens_done // BLOCK_TOKENS])

    def release(self, hash_ids) -> None:
        for h in dict.fromkeys(hash_ids):
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.idle[h] = None                          # most recently released last

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
