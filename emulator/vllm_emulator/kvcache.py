"""The V1-like engine's KV cache: a pool of fixed-size blocks with a prefix cache, by counts.

Blocks are not objects: the pool counts the blocks in use (reference count > 0). A request holds
``ceil(tokens / block_size)`` blocks; the first of them may be *shared* prefix blocks, which the pool
knows by key (the hash of the prompt up to and including that block, as vLLM's block hashes) with a
reference count. A shared block whose count drops to 0 stays cached, still counted as free, in an
LRU list: a later request with the same prefix takes it back without recomputing it, and an
allocation that finds no never-used free block evicts the least recently freed one (vLLM's free
block queue does both).

Usage, as vLLM's ``vllm:kv_cache_usage_perc``, is the fraction of blocks with a reference.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

__all__ = ["BlockPool"]


class BlockPool:
    """Counts of a KV cache of ``num_blocks`` blocks, plus the prefix-cache table."""

    __slots__ = ("_lru", "_refs", "num_blocks", "used")

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.used = 0
        self._refs: dict[Hashable, int] = {}  # key -> reference count (0: cached, free, in _lru)
        self._lru: OrderedDict[Hashable, None] = OrderedDict()  # free cached keys, oldest first

    @property
    def free(self) -> int:
        """Blocks an allocation may take (cached free blocks included: they can be evicted)."""
        return self.num_blocks - self.used

    @property
    def cached_free(self) -> int:
        return len(self._lru)

    def usage(self) -> float:
        return self.used / self.num_blocks

    # ------------------------------------------------------------------ private blocks

    def can_allocate(self, blocks: int) -> bool:
        return blocks <= self.num_blocks - self.used

    def allocate(self, blocks: int) -> None:
        """Take ``blocks`` new blocks, evicting cached free blocks if the never-used ones run out."""
        if blocks <= 0:
            return
        spare = self.num_blocks - self.used - len(self._lru)
        if blocks > spare:
            lru = self._lru
            refs = self._refs
            for _ in range(blocks - spare):
                key, _ = lru.popitem(last=False)
                del refs[key]
        self.used += blocks

    def release(self, blocks: int) -> None:
        self.used -= blocks

    # ------------------------------------------------------------------ shared prefix blocks

    def longest_prefix(self, keys: Sequence[Hashable], limit: int) -> int:
        """How many of the first ``keys`` (at most ``limit``) are cached, counting from the first."""
        refs = self._refs
        n = 0
        for key in keys:
            if n >= limit or key not in refs:
                break
            n += 1
        return n

    def free_among(self, keys: Sequence[Hashable]) -> int:
        """How many of ``keys`` (all cached) are free, so that taking them uses free blocks."""
        lru = self._lru
        return sum(1 for key in keys if key in lru)

    def acquire(self, keys: Sequence[Hashable]) -> None:
        """Take a reference on cached blocks (a prefix-cache hit)."""
        refs = self._refs
        lru = self._lru
        for key in keys:
            count = refs[key]
            if count == 0:
                del lru[key]
                self.used += 1
            refs[key] = count + 1

    def register(self, key: Hashable) -> bool:
        """Make one of a request's blocks (already counted in use) a shared block under ``key``.

        False when the key is already cached (another request computed the same prefix meanwhile):
        the request's block then stays private, as in vLLM.
        """
        if key in self._refs:
            return False
        self._refs[key] = 1
        return True

    def drop(self, keys: Sequence[Hashable]) -> None:
        """Release references on shared blocks; those left unreferenced stay cached, free."""
        refs = self._refs
        lru = self._lru
        for key in keys:
            count = refs[key] - 1
            refs[key] = count
            if count == 0:
                lru[key] = None
                self.used -= 1
