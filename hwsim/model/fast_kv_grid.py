"""The fast KV kernel's launch plan (calibration/fast_kv_attn.py FastKVAttention; issue 44): one
launch runs a segment per storage width (classes of one width share one, in class order: sinks,
outliers, routine, recent), each with its own splits, planned as calibration/fast_grid.py
`plan_splits` plans them (tests/test_fast_kv_small_batch.py holds the two equal): about WAVES
programs an SM in all, shared by the segments in proportion to their bytes, a small segment one,
at least MIN_BLOCKS token blocks a split. hwsim costs the fast family over this plan, not over
FlashAttention-2's split heuristic (hwsim/model/ops.py decode_attention `segments`)."""

from __future__ import annotations

import math

from hwsim.model.fast_kv_occupancy import kernel_width

WAVES = 4          # fast_grid.plan_splits' defaults
MIN_BLOCKS = 4


def class_tokens(fmt, context: int) -> list[tuple[float, int]]:
    """(code width, tokens) of each class of a KvFormat at this context, as the kernel's cache
    holds them (fast_grid.class_widths: whole tokens, outliers rounded)."""
    sinks = min(fmt.sinks, context)
    recent = min(fmt.recent, context - sinks)
    rest = context - sinks - recent
    outliers = int(round(rest * fmt.outlier_fraction))
    routine = max(fmt.routine.key_bits, fmt.routine.value_bits)
    return [(fmt.sink_bits, sinks), (fmt.outlier_bits, outliers), (routine, rest - outliers),
            (fmt.recent_bits, recent)]


def plan(widths: list[tuple[int, int]], rows: int, block: int, sms: int) -> list[int]:
    """Splits per (bits, tokens) segment: fast_grid.plan_splits with the chip's SM count."""
    weight = [bits * tokens for bits, tokens in widths]
    target = max(1, math.ceil(WAVES * sms / rows))
    return [max(1, min(math.ceil(tokens / (MIN_BLOCKS * block)), round(target * w / sum(weight))))
            for (_, tokens), w in zip(widths, weight)]


def segments(fmt, context: int, rows: int, block: int, sms: int) -> tuple[tuple[int, int], ...]:
    """(tokens, splits) of each segment one launch runs for `rows` (sequence, KV head) pairs."""
    merged: dict[int, int] = {}
    for bits, tokens in class_tokens(fmt, context):
        if tokens:
            width = kernel_width(bits)
            merged[width] = merged.get(width, 0) + tokens
    widths = list(merged.items())
    return tuple((tokens, n) for (_, tokens), n in zip(widths, plan(widths, rows, block, sms)))
