"""Upper bounds and finiteness, checked when a file is loaded, so an absurd number is one
error naming file, line and key instead of a crash, a MemoryError or `Infinity` in a JSON.

Two layers: every number in every YAML we read must be finite and of a sane magnitude
(check_numbers, from the loader); a few profile counts that size arrays get tighter bounds
(profile_problems). What a run will *cost* is estimated separately (hwsim.cost).
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


def _get(data: Any, key: str) -> Any:
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_problems(data: dict):
    """(dotted key, message) for each model-shape count above MODEL_BOUNDS, and each pair of
    counts that no model can have; `data` is the model file as loaded (a plain dict)."""
    for key, bound in MODEL_BOUNDS.items():
        node = _count(_get(data, key))
        if node is not None and node > bound:
            yield key, f"{node} is more than this simulator supports (at most {bound})"
    layers, dense = _count(data.get("layers")), _count(_get(data, "moe.dense_layers"))
    if layers is not None and dense is not None and dense >= layers:
        yield "moe.dense_layers", (f"{dense} dense layers of {layers} layers in all: an MoE model has "
                                   "at least one MoE layer (dense_layers < layers)")
    has_dense_layers = _get(data, "moe") is None or (dense or 0) > 0
    if has_dense_layers and not _count(data.get("ffn")):
        yield "ffn", "the dense FFN layers need their intermediate size (ffn: above 0)"
    if (_count(_get(data, "moe.shared_experts")) or 0) > 0 and not _count(_get(data, "moe.shared_ffn")):
        yield "moe.shared_ffn", "the shared experts need their intermediate size (shared_ffn: above 0)"


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
    power = data.get("power") or {}
    limit, idle = _value(power, "limit_w"), _value(power, "idle_w")
    if limit is not None and idle is not None and limit <= idle:
        yield "power.limit_w", (f"a limit of {limit:g} W is not above the idle power ({idle:g} W): the "
                                "board draws that much with its SMs clock-gated, so no clock can hold it")
    clock, low = _value(data.get("sm") or {}, "clock_mhz"), _value(power, "min_clock_mhz")
    if clock is not None and low is not None and low > clock:
        yield "power.min_clock_mhz", f"{low:g} MHz is above the maximum SM clock ({clock:g} MHz)"
    tensor = _value(power, "tensor_clock_mhz")
    if clock is not None and tensor is not None and tensor > clock:
        yield "power.tensor_clock_mhz", f"{tensor:g} MHz is above the maximum SM clock ({clock:g} MHz)"
    l2, hbm_gb = _value(data.get("l2") or {}, "capacity_mib"), _value(data.get("hbm") or {}, "capacity_gb")
    if l2 is not None and hbm_gb is not None and l2 * 2**20 > hbm_gb * 1e9:
        yield "l2.capacity_mib", (f"an L2 of {l2:g} MiB is larger than its HBM ({hbm_gb:g} GB): a cache "
                                  f"of the memory it caches is smaller than it")
    cuda = data.get("cuda") or {}
    total, context = _value(cuda, "total_memory_mib"), _value(cuda, "context_mib")
    if total is not None and context is not None and context >= total:
        yield "cuda.context_mib", (f"a context of {context:g} MiB is not below the {total:g} MiB CUDA "
                                   "reports in all: it would leave nothing for the weights")
    hbm = data.get("hbm") or {}
    try:
        channels = hbm["stacks"]["value"] * hbm["channels_per_stack"]["value"]
    except (KeyError, TypeError):
        return
    if channels > MAX_HBM_CHANNELS:
        yield "hbm.channels_per_stack", (f"{channels} HBM channels in all is more than this simulator "
                                         f"supports (at most {MAX_HBM_CHANNELS})")


def _value(block: dict, key: str) -> float | None:
    """A sourced profile number ({value, source}) of a profile block, if it is one."""
    node = block.get(key)
    value = node.get("value") if isinstance(node, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# Physical and practical upper bounds of scenario and profile numbers, by "Class.field" of the
# schema (hwsim.config.scenario, hwsim.config.profile), each with the reason a user is shown.
# The schema's own ge/gt bounds give the lower ends; MAX_ABS bounds every other number.
_TOKENS = (10_000_000, "longer than any model's context window (the longest are about 10 M tokens)")
_STEPS = (10_000_000, "more than any run simulates (a step is one token of every sequence)")
_MS = (3_600_000.0, "more than an hour")
_GROUP = (1 << 20, "a scale shared by more than a million elements: beyond any tensor row")
VALUE_BOUNDS: dict[str, tuple[float, str]] = {
    "Lengths.tokens": _TOKENS, "Lengths.low": _TOKENS, "Lengths.high": _TOKENS, "Lengths.max_tokens": _TOKENS,
    "Lengths.sigma": (5.0, "a lognormal sigma above 5 spreads lengths e^5 = 150x either side of the "
                           "median (public traces fit 0.5 to 2)"),
    "Arrivals.rate_per_s": (1e6, "a million requests a second is far beyond one serving deployment"),
    "Arrivals.cv": (100.0, "a gap CV above 100 is one burst and silence (public traces: 1 to 10)"),
    "Arrivals.users": (100_000, "more concurrent users than one simulated deployment serves; model "
                                "a larger population as open-loop arrivals"),
    "Arrivals.think_ms": _MS,
    "Arrivals.requests": (10_000_000, "more requests than one run simulates (hwsim.serving.traces)"),
    "Arrivals.rate_scale": (1e6, "replaying a trace a million times as fast leaves no gaps to replay"),
    "Arrivals.start": (1e9, "trace time beyond 30 years"),
    "Arrivals.duration": (1e9, "trace time beyond 30 years"),
    "Workload.batch_size": (1_000_000, "a million sequences decoded in one step fit in no accelerator"),
    "Workload.context_tokens": _TOKENS, "Workload.prompt_tokens": _TOKENS,   # steps: see hwsim.cost
    "Workload.max_batch_size": (1_000_000, "a million sequences in one iteration fit in no accelerator"),
    "Workload.token_budget": _TOKENS, "Workload.ttft_target_ms": _MS, "Workload.itl_target_ms": _MS,
    "Runtime.kernel_records": _STEPS,
    "TokenClass.tokens": (1_000_000, "sink and recent windows are tokens to thousands of tokens "
                                     "(StreamingLLM keeps 4 sinks); a million would be every token of "
                                     "the context, kept at full width"),
    "VectorQuant.entries": (1 << 16, "codebooks have at most 16-bit codes"),
    "VectorQuant.dims": (256, "a code of more than 256 elements is no vector quantizer in use"),
    "KvCache.group_size": _GROUP, "TensorWeights.group_size": _GROUP, "Weights.group_size": _GROUP,
    "KvCache.relayout_ops_subbyte": (1e4, "integer ops per element; dequant kernels use a few to tens"),
    "KvCache.relayout_ops_byte": (1e4, "integer ops per element; dequant kernels use a few to tens"),
    "Routing.zipf_exponent": (10.0, "above 10 every token picks the same experts (measured: 0.5 to 2)"),
    "Routing.hot_persist_steps": _STEPS,
    "Routing.capacity_factor": (1e3, "a capacity of a thousand times the mean load caps nothing"),
    "ExpertCache.capacity_mib": (1e6, "a terabyte of on-chip SRAM is no chip"),
    "Parallel.tp": (4096, "parallel.gpus is at most 4096"), "Parallel.ep": (4096, "parallel.gpus is at most 4096"),
    "Parallel.nodes": (4096, "parallel.gpus is at most 4096"),
    "Parallel.redundant_experts": (16384, "more copies than any model has experts (moe.experts <= 16384)"),
    "Scenario.budget_ms": _MS,
    # profiles: numbers no real chip of any kind reaches
    "SmArray.clock_mhz": (10_000.0, "no processor clocks its cores above 10 GHz"),
    "Power.limit_w": (100_000.0, "a 100 kW board is no accelerator (the largest draw about 1-2 kW)"),
    "Power.idle_w": (100_000.0, "a 100 kW board is no accelerator"),
    "Power.clock_w": (100_000.0, "a 100 kW board is no accelerator"),
    "Power.min_clock_mhz": (10_000.0, "no processor clocks its cores above 10 GHz"),
    "Power.tensor_clock_mhz": (10_000.0, "no processor clocks its cores above 10 GHz"),
    "Hbm.capacity_gb": (100_000.0, "100 TB of memory on one accelerator"),
    "Hbm.peak_bandwidth_gbps": (1e6, "1 PB/s of memory bandwidth on one accelerator"),
    "L2Cache.capacity_mib": (1e6, "a terabyte of on-chip cache is no chip"),
}


def value_problems(obj, prefix: tuple[str, ...] = ()):
    """(dotted key, message) for each number of a validated schema object (a Scenario, a
    HardwareProfile) above its VALUE_BOUNDS entry; a profile's {value, source} counts as its value."""
    from pydantic import BaseModel

    for name in type(obj).model_fields:
        value = getattr(obj, name)
        path = prefix + (name,)
        bound = next((VALUE_BOUNDS[f"{c.__name__}.{name}"] for c in type(obj).__mro__
                      if f"{c.__name__}.{name}" in VALUE_BOUNDS), None)     # a kind's: its family's
        number = getattr(value, "value", value) if isinstance(value, BaseModel) and "source" in type(
            value).model_fields else value
        if bound is not None and isinstance(number, (int, float)) and not isinstance(number, bool):
            if number > bound[0]:
                yield ".".join(path), f"{_shown(number)} is more than {_shown(bound[0])}: {bound[1]}"
        elif isinstance(value, BaseModel):
            yield from value_problems(value, path)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, BaseModel):
                    yield from value_problems(item, path + (str(key),))


def _shown(number: float) -> str:
    if isinstance(number, int) or (number >= 1e4 and number == int(number)):
        return f"{int(number):,}"
    return f"{number:g}"
