"""weights.expert_gemm_speedup_by_kernel (issue 31): how much faster one expert's gate/up GEMM
runs over the scenario's sub-byte expert weights than over bf16 ones, for each dequant kernel
family the chip offers (hwsim.model.dequant_kernels), at the rows an active expert gets on
average in this scenario (uniform routing: batch x top-k over the expected distinct experts).
Each GEMM is simulated alone on the device, as a microbenchmark times it (hwsim.operators).
The fast family's figure at 4 bits is the quicker of hwsim's fast W4A16 kernel and gemlite's
(issue 44, item 2: "where gemlite beats the fast W4A16 family, it is the fast family"); each
family's kernel is named beside it. Plans still run the fast W4A16 kernel (built from sizes only)."""

from __future__ import annotations

from dataclasses import replace

from hwsim import operators
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model import ops
from hwsim.model.dequant_kernels import FAMILIES, Families
from hwsim.model.schedule import Schedule
from hwsim.model.weight_format import decoder_takes
from hwsim.speedups.gemlite_choice import GEMLITE_FORMATS, gemlite_time_s
from hwsim.workload.router import expected_distinct


def expert_rows(schedule: Schedule, batch: int) -> int:
    """Rows an active expert's GEMM gets on average (a dense FFN: the batch)."""
    moe = schedule.model.moe
    if moe is None:
        return batch
    return max(1, round(batch * moe.top_k / expected_distinct(moe.experts, moe.top_k, batch)))


KERNEL_OF = {"naive": "tinygemm", "fast": "fast-w4a16", "native-decoder": "decoder"}


def expert_gemm_speedup_by_kernel(schedule: Schedule, chip: ChipSpec, batch: int,
                                  families: Families) -> tuple[dict | None, dict]:
    """(bf16 GEMM time over each family's (None for a family the chip lacks), family -> the
    kernel its figure came from); (None, {}) when the experts are not expanded from codes (bf16,
    or native FP8/FP4)."""
    fmt = schedule.wplan.experts
    if not fmt.expanded:
        return None, {}
    moe = schedule.model.moe
    m, k = expert_rows(schedule, batch), schedule.model.hidden
    n = 2 * (moe.expert_ffn if moe else schedule.model.ffn)
    addr = 1 << 40

    def time(f) -> float:
        if f.is_bf16:
            ks = ops.gemm("e", 0, m, k, n, chip, weight_addr=addr, weight_bytes=2.0, data=Component.EXPERT_READ)
        else:
            ks = schedule.quant_gemm_kernels(f, "e", 0, m, k, n, addr, Component.EXPERT_READ)
        return operators.device_time_s(chip, ks)

    bf16 = time(replace(fmt, format="bf16", dequant="native", kernel=None))
    out = {}
    for family in FAMILIES:
        if family == "native-decoder":
            ok = families.decoder and decoder_takes(chip.decoder_formats, fmt.format)
            variant = replace(fmt, dequant="decoder", kernel=None) if ok else None
        else:
            kernel = families.weights.get(family)
            variant = replace(fmt, dequant="software", kernel=kernel) if kernel else None
        out[family] = bf16 / time(variant) if variant else None
    kernels = {f: KERNEL_OF[f] for f, v in out.items() if v is not None}
    if out["fast"] is not None and fmt.format in GEMLITE_FORMATS and fmt.group_size > 0:
        gemlite = bf16 / gemlite_time_s(chip, m, k, n, GEMLITE_FORMATS[fmt.format], fmt.group_size, addr,
                                        Component.EXPERT_READ)
        if gemlite > out["fast"]:
            out["fast"], kernels["fast"] = gemlite, "gemlite"
    return {"rows": m, **out}, kernels
