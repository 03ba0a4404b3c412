"""Hugging Face's eager experts loop (`set_experts_implementation("eager")`) moved to another batch.

The loop runs, in each MoE layer, one iteration per expert the batch reached: find its tokens
(`torch.where` on the routing mask, a sync), gather them, the gate+up GEMM, the activation, the
down GEMM, the routing weight, `index_add_` into the output. Its GEMMs' rows are that expert's
tokens, so no dim of the trace is the batch: the rows rule of `retarget` cannot move it. Here
the iterations themselves move: at the new point a layer runs the expected distinct experts of
uniform routing (hwsim.workload.router.expected_distinct), each a copy of a traced iteration
(host steps included: the loop's CPU time and syncs grow with the experts reached), its rows
the new batch x top-k shared among them and its memory kernels' bytes scaled with its rows.

An iteration is delimited from the stream: it ends at the step that runs its `index_add_`, the
next starts right after, and a layer's loop ends where the next layer's attention runs; the
first of a layer spans as many steps as the second (the iterations are the same code). Its rows
are its first weight GEMM's M (the expert's gate+up: an expert's weights may have another
weight's shape, as OLMoE's gate+up has the attention's 2048 x 2048).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hwsim.model import ir
from hwsim.ktrace.classify import Point
from hwsim.model.shapes import ModelShape
from hwsim.workload.router import expected_distinct

END_OP = "aten::index_add_"


@dataclass(frozen=True)
class Loop:
    """One layer's loop: its iterations as [start, end) ranges of step indices, and each one's
    traced rows (its gate+up GEMM's M)."""
    iterations: tuple[tuple[int, int], ...]
    rows: tuple[int, ...]


def find(steps: tuple[ir.HostStep, ...], model: ModelShape) -> list[Loop]:
    """The loops of a traced step; [] where it runs no loop over experts (grouped GEMMs, a dense
    model) or its iterations cannot be delimited (a layer that reached one expert)."""
    if not model.moe:
        return []
    ends = [i for i, st in enumerate(steps) if any(k.op == END_OP for k in st.kernels)]
    attention = [i for i, st in enumerate(steps) if any(isinstance(k.item, ir.Attention) for k in st.kernels)]
    layers: list[list[int]] = []
    for e in ends:                       # a layer's loop ends where the next layer's attention runs
        if layers and not any(layers[-1][-1] < a < e for a in attention):
            layers[-1].append(e)
        else:
            layers.append([e])
    loops = []
    for group in layers:
        if len(group) < 2:
            continue
        bounds = [e + 1 for e in group]
        starts = [bounds[0] - (bounds[1] - bounds[0])] + bounds[:-1]     # the first as long as the second
        rows = [_rows(steps[s:e]) for s, e in zip(starts, bounds)]
        if starts[0] < 0 or None in rows:
            return []
        loops.append(Loop(tuple(zip(starts, bounds)), tuple(rows)))
    return loops


def _rows(steps) -> int | None:
    """An iteration's tokens: the M of its first weight GEMM (the expert's gate+up)."""
    return next((k.item.m for st in steps for k in st.kernels if isinstance(k.item, ir.Gemm) and k.item.weight),
                None)


def reached(model: ModelShape, batch: int) -> int:
    """Experts a layer's loop visits at this batch: the expected distinct of uniform top-k."""
    moe = model.moe
    return max(1, round(expected_distinct(moe.experts, moe.top_k, batch)))


def inside(loops: list[Loop]) -> set[int]:
    """The indices of the steps that run in an iteration of one of the loops."""
    return {i for loop in loops for start, end in loop.iterations for i in range(start, end)}


def moved(steps: tuple[ir.HostStep, ...], loops: list[Loop], model: ModelShape,
          new: Point) -> list[tuple[ir.HostStep, bool]]:
    """The steps at the new point: each loop's iterations repeated or cut to the experts the new
    batch reaches, each (step, whether it is in an iteration: if not, its items follow
    `retarget`'s rules)."""
    out: list[tuple[ir.HostStep, bool]] = []
    at = 0
    count = reached(model, new.batch)
    total = new.batch * model.moe.top_k
    for loop in loops:
        out += [(st, False) for st in steps[at:loop.iterations[0][0]]]
        for j in range(count):
            rows = (total * (j + 1)) // count - (total * j) // count
            i = j % len(loop.iterations)
            start, end = loop.iterations[i]
            scale = max(rows, 1) / loop.rows[i]
            out += [(_with_rows(st, max(rows, 1), scale), True) for st in steps[start:end]]
        at = loop.iterations[-1][1]
    return out + [(st, False) for st in steps[at:]]


def _with_rows(st: ir.HostStep, rows: int, scale: float) -> ir.HostStep:
    """An iteration's step with its expert GEMMs on `rows` tokens and its memory kernels' bytes
    scaled with them."""
    def item(it):
        if isinstance(it, ir.Gemm) and it.weight:
            return replace(it, m=rows)
        if isinstance(it, ir.Memory):
            return replace(it, read_bytes=it.read_bytes * scale, write_bytes=it.write_bytes * scale,
                           index_rows=rows if it.index_rows else 0)
        return it
    return replace(st, kernels=tuple(replace(k, item=item(k.item)) for k in st.kernels))
