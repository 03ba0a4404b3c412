"""Move a trace's work items from the point it was recorded at to the point predicted.

Rules (docs/traces.md): a GEMM's rows equal to the traced batch become the new batch, equal to
batch x top-k the new batch x top-k; a batched GEMM of activations (an eager attention's QK and
PV) whose count is the batch or the batch x the query or cached heads moves with the batch, and
its dims equal to the context with the context; a grouped GEMM's rows are the new batch x top-k spread
over the expected distinct experts of uniform routing when they summed to the traced batch x
top-k; an attention's batch
becomes the new batch and a key length equal to the traced context (up to 64 tokens past it:
a cache that grew during the capture) the new one; a memory
kernel's bytes scale with the batch and the context where a dim of its largest tensor was one of
them (and a grid-limited reduction's blocks with them: the same work per block). Anything else
stays as traced and is counted as not rescaled (held kernels included)."""

from __future__ import annotations

from dataclasses import replace

from hwsim.model import ir
from hwsim.ktrace.classify import Point, grouped_rows


def retarget(item: ir.WorkItem, old: Point, new: Point) -> tuple[ir.WorkItem, bool]:
    """(item at the new point, whether it was rescaled); an item the rules do not reach is
    returned as it was, with False (only counted when the point moves)."""
    if old == new:
        return item, True
    b = _batch_map(old, new)
    if isinstance(item, ir.Gemm):
        if item.weight and item.m in b:
            return replace(item, m=b[item.m]), True
        heads = {old.batch * h: new.batch * h for h in old.heads}      # an eager attention's bmm
        if not item.weight and (item.batch in b or item.batch in heads):
            return replace(item, batch=b.get(item.batch) or heads[item.batch], n=_ctx(item.n, old, new),
                           k=_ctx(item.k, old, new)), True
        return item, False
    if isinstance(item, ir.GroupedGemm):
        total = sum(item.rows)
        near = next((t for t in b if abs(total - t) <= len(item.rows)), None)   # rows were rounded
        if near is not None:
            return replace(item, rows=grouped_rows(b[near], len(item.rows), new.top_k)), True
        return item, False
    if isinstance(item, ir.Attention):
        if item.phase != "decode":
            return item, False
        return replace(item, batch=b.get(item.batch, item.batch), kv_len=_ctx(item.kv_len, old, new)), \
            item.batch in b
    if isinstance(item, ir.Memory):
        if not (item.per_batch or item.per_context):
            return item, False
        f = (new.batch / old.batch if item.per_batch else 1.0) * \
            (new.context / old.context if item.per_context else 1.0)
        return replace(item, read_bytes=item.read_bytes * f, write_bytes=item.write_bytes * f,
                       ctas=max(1, round(item.ctas * f)) if item.ctas else 0,
                       index_rows=max(1, round(item.index_rows * f)) if item.index_rows else 0), True
    return item, isinstance(item, ir.Absorbed)


def _batch_map(old: Point, new: Point) -> dict[int, int]:
    return {old.batch * old.top_k: new.batch * new.top_k, old.batch: new.batch}


def _ctx(n: int, old: Point, new: Point) -> int:
    """A context dim moved to the new context, the tokens past it kept (Point.is_context)."""
    return new.context + (n - old.context) if old.is_context(n) else n
