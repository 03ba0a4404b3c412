"""Upper bounds and finiteness, checked when a file is loaded, so an absurd number is one
error naming file, line and key instead of a crash, a MemoryError or `Infinity` in a JSON.

Two layers: every number in every YAML we read must be finite and of a sane magnitude
(check_numbers, from the loader); a few profile counts that size arrays get tighter bounds
(profile_problems). What a run will *cost* is estimated separately (hwsim.config.cost).
"""

from __future__ import annotations

import math
from typing import Any

from hwsim.errors import ConfigError

MAX_ABS = 1e15        # no quantity hwsim reads is larger (bytes, tokens, GB/s, ...)
MIN_ABS = 1e-12       # nor, unless zero, smaller: 5e-324 or 1e-30 would overflow a division

# Profile counts that size simulated components (one server or array slot each).
PROFILE_BOUNDS = {
    "sm.count": 4096,
    "kernel.cta_slots_per_sm": 1024,
    "hbm.stacks": 64,
    "hbm.channels_per_stack": 1024,
}
MAX_HBM_CHANNELS = 8192
# Any sourced profile number (GB/s, TFLOP/s, ns, us, MiB, MHz ...) lies in this range.
PROFILE_VALUE_RANGE = (1e-6, 1e9)


# Model-shape counts that size per-layer and per-expert state (routing tables, caches).
MODEL_BOUNDS = {"layers": 1024, "moe.experts": 16384, "moe.top_k": 256, "moe.shared_experts": 256,
                "attention.heads": 4096}


def model_problems(data: dict):
    """(dotted key, message) for each model-shape count above MODEL_BOUNDS; `data` is the
    model file as loaded (a plain dict)."""
    for key, bound in MODEL_BOUNDS.items():
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, int) and not isinstance(node, bool) and node > bound:
            yield key, f"{node} is more than this simulator supports (at most {bound})"


def _walk(data: Any, path: tuple[str, ...]):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _walk(value, path + (str(key),))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _walk(value, path + (str(i),))
    else:
        yield path, data


def number_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if abs(value) > MAX_ABS:
        return f"{value!r} is larger than any quantity hwsim models (at most {MAX_ABS:g})"
    if value and abs(value) < MIN_ABS:
        return f"{value!r} is too close to zero (use 0 or at least {MIN_ABS:g})"
    return None


def check_numbers(data: Any, key_lines: dict[str, int], source: str) -> None:
    """Every number in a loaded YAML document is finite and of a sane magnitude."""
    for path, value in _walk(data, ()):
        problem = number_problem(value)
        if problem:
            key = ".".join(path)
            raise ConfigError(problem, file=source, line=_line(key_lines, path), key=key or None)


def _line(key_lines: dict[str, int], path: tuple[str, ...]) -> int | None:
    parts = list(path)
    while parts:
        if ".".join(parts) in key_lines:
            return key_lines[".".join(parts)]
        parts.pop()
    return None


def profile_problems(data: dict):
    """(dotted key, message) for each profile number outside its bounds; `data` is the
    profile as a plain dict (model_dump)."""
    lo, hi = PROFILE_VALUE_RANGE
    for path, value in _walk(data, ()):
        if path and path[-1] == "value" and isinstance(value, (int, float)) and not isinstance(value, bool):
            key = ".".join(path[:-1])
            bound = PROFILE_BOUNDS.get(key)
            if bound is not None and value > bound:
                yield key, f"{value:g} is more than this simulator supports (at most {bound})"
            elif not lo <= value <= hi and not isinstance(value, int):
                yield key, f"{value!r} is outside the range of any real chip ({lo:g} to {hi:g})"
            elif isinstance(value, int) and value > hi:
                yield key, f"{value} is outside the range of any real chip (at most {hi:g})"
    hbm = data.get("hbm") or {}
    try:
        channels = hbm["stacks"]["value"] * hbm["channels_per_stack"]["value"]
    except (KeyError, TypeError):
        return
    if channels > MAX_HBM_CHANNELS:
        yield "hbm.channels_per_stack", (f"{channels} HBM channels in all is more than this simulator "
                                         f"supports (at most {MAX_HBM_CHANNELS})")
