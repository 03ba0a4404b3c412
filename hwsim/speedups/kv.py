"""kv.attention_speedup: how much faster one decode pass's KV path runs over the scenario's KV
cache format than over a bf16 cache, everything else of the scenario alike (docs/kv_cache.md).

The KV path of a layer is what writes and reads its cache (Schedule.kv_path): the appends, an
unfused expansion, the attention kernel(s). Each path is simulated alone on the device, as a
microbenchmark times it (hwsim.operators), once per distinct kind of layer (a sliding window
or not), and weighted by how many layers are of that kind.
"""

from __future__ import annotations

from collections import Counter

from hwsim import operators
from hwsim.hw.chip import ChipSpec
from hwsim.model.schedule import Schedule, StepShape
from hwsim.workload.kv_format import BF16_KV


def attention_speedups(schedule: Schedule, chip: ChipSpec, batch: int, context: int,
                       variants: dict) -> tuple[float, dict[str, float | None] | None]:
    """attention_speedup: the bf16 KV path's time over this format's (above 1: the format's
    path is faster); and the same for each kernel family that could read this cache
    (`variants`: family -> (KvFormat, dequant), or None where the chip has none;
    hwsim.model.dequant_kernels.kv_variants). A bf16 cache: 1 and None. The bf16 path is
    timed once for both."""
    if schedule.kv.is_unquantized:
        return 1.0, None
    shape = StepShape("decode", batch, batch, context)
    bf16 = kv_path_s(schedule.with_kv(BF16_KV), chip, shape)
    by_kernel = {family: bf16 / kv_path_s(schedule.with_kv(*v), chip, shape) if v else None
                 for family, v in variants.items()}
    return bf16 / kv_path_s(schedule, chip, shape), by_kernel


def kv_path_s(schedule: Schedule, chip: ChipSpec, shape: StepShape) -> float:
    """Device seconds of every layer's KV path in a decode pass of `shape`, on `chip`."""
    attention = schedule.model.attention
    kinds = Counter(attention.window_at(layer) for layer in range(schedule.model.layers))
    first = {w: next(layer for layer in range(schedule.model.layers) if attention.window_at(layer) == w)
             for w in kinds}
    return sum(n * operators.device_time_s(chip, schedule.kv_path(first[w], shape))
               for w, n in kinds.items())
