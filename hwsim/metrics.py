"""Breakdown components (named once, defined with formulas in docs/metrics.md) and summaries."""

from __future__ import annotations

from enum import Enum

import numpy as np


class Component(str, Enum):
    LAUNCH_OVERHEAD = "launch_overhead"
    HOST = "host"            # the device idle while the host works (an imported trace's CPU time, syncs)
    KERNEL_OVERHEAD = "kernel_overhead"
    WEIGHT_READ = "weight_read"
    EXPERT_READ = "expert_weight_read"
    KV_READ = "kv_read"
    KV_WRITE = "kv_write"
    DEQUANT = "dequant"
    ATTENTION_COMPUTE = "attention_compute"
    GEMM_COMPUTE = "gemm_compute"
    ROUTER = "router"
    ACTIVATION_IO = "activation_io"
    EXPERT_LOAD_WAIT = "expert_load_wait"
    IDLE = "idle"


class CommComponent(str, Enum):
    """Components of a multi-GPU step beside the kernels' (docs/metrics.md): collectives on the
    critical path, and GPUs idle at a collective until the slowest one arrives. Kept apart from
    Component so single-GPU breakdowns keep their keys."""
    ALL_REDUCE = "all_reduce"
    ALL_TO_ALL = "all_to_all"
    ALL_GATHER = "all_gather"
    GPU_WAIT = "gpu_wait"


# Bytes moved are reported per traffic class; each kernel's data component decides its class.
TRAFFIC_CLASS = {
    Component.WEIGHT_READ: "weights",
    Component.EXPERT_READ: "weights",
    Component.ROUTER: "weights",
    Component.KV_READ: "kv",
    Component.KV_WRITE: "kv",
}


def traffic_class(component: Component) -> str:
    return TRAFFIC_CLASS.get(component, "activations")


def percentiles(values_s, quantiles=(50, 99)) -> dict[str, float] | None:
    """The given percentiles and the mean of durations in seconds, reported in milliseconds
    (None when there are no values)."""
    return percentiles_in_place(np.asarray(values_s, dtype=float) * 1e3, quantiles)   # a fresh copy


def percentiles_in_place(values_ms: np.ndarray, quantiles=(50, 99)) -> dict[str, float] | None:
    """`percentiles` of durations already in milliseconds (a float64 array), without a copy:
    the same numbers, but the percentiles partition `values_ms` in place (its order is lost)."""
    if not values_ms.size:
        return None
    mean = float(values_ms.mean())      # first: numpy sums pairwise, so its order counts
    out = {f"p{q}": float(np.percentile(values_ms, q, overwrite_input=True)) for q in quantiles}
    out["mean"] = mean
    return out
