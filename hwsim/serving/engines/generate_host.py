"""The host of transformers' generate() (workload.engine.kind hf-generate) issuing hwsim's
schedule: an eager generate() step is host-bound, each ATen op its Python, dispatch and launch
(hwsim/serving/engines/generate_ops.py counts them from the library on CPU; the profile's
generate_issue_us and generate_plan_ms time them). The step's host time is spread over the
schedule's kernels in order on the stream's host (Stream.launch_s), so each kernel waits for its
issue and the device runs behind it; the step ends on the last kernel (generate syncs on the
token every step).

Without transformers (CI installs none) the launches are the profile's measured bf16 step
(kernels_per_layer, kernels_fixed, unscaled to the model) plus the quantized cache's own ops a
layer as hwsim's chain has them (hwsim/model/hqq_dequant.py: each ATen op one kernel; with
transformers the two agree: 28 a layer at 2 bits, 16 at 4), and the run says so.
"""

from __future__ import annotations

from hwsim.errors import ConfigError
from hwsim.model.kernel import Kernel
from hwsim.model.schedule import StepShape


def cache_launches(bits: int | None) -> int:
    """The quantized cache's launches a layer over the DynamicCache's: HQQ's dequant of K and V,
    and the residual's two appends (the whole-cache cats of K and V are in both)."""
    from hwsim.model.hqq_dequant import chain_kernels
    return 0 if bits is None else 2 * chain_kernels(bits) + 2


def step_launches(engine, host, model) -> tuple[float, str]:
    """(launches of one eager generate() step, how they were counted)."""
    from hwsim.serving.engines import generate_ops
    try:
        return generate_ops.step_launches(host, model, model.layers, engine.bits), "counted from transformers"
    except ImportError:             # no transformers (or, for the HQQ cache, no hqq) to count with
        launches = ((host.kernels_per_layer.value + cache_launches(engine.bits)) * model.layers
                    + host.kernels_fixed.value)
        return launches, (f"not counted: transformers{' and hqq' if engine.bits else ''} not installed; the "
                          f"profile's bf16 step, its layer as measured on {host.ops_per_layer_model or 'its model'}, "
                          f"plus the cache's {cache_launches(engine.bits)} a layer")


def issue_from_generate(cfg, model, schedule, streams) -> str:
    """Set each stream's per-kernel launch time to generate()'s host time of a step over the
    schedule's kernels of a step; the line the run reports."""
    from hwsim.serving.engine_host import load_engine_host
    from hwsim.serving.engines.generate_ops import host_s_of
    engine, w = cfg.workload.engine, cfg.workload
    if model.moe:
        raise ConfigError("engine hf-generate times dense models' steps (a MoE step's kernels depend on its "
                          "routing)", key="workload.engine.kind")
    host = load_engine_host(engine.host)
    launches, how = step_launches(engine, host, model)
    host_s = host_s_of(host, launches, new_shape=engine.attention_plans == "per-step")
    shape = StepShape("decode", w.batch_size, w.batch_size, w.context_tokens)
    kernels = sum(isinstance(k, Kernel) for k in schedule.step(shape, {}))
    for stream in streams:
        stream.launch_s = host_s / kernels
    return (f"engine hf-generate: host {engine.host} issues {launches:.0f} ops a step ({how}) in "
            f"{host_s * 1e3:.1f} ms, spread over the schedule's {kernels} kernels")
