"""A run's summary as typed parts (issue 32): one immutable record per subsystem's part, composed
by the run into a RunSummary.

Each subsystem's summary function returns its part (hwsim/run.py: kv, moe, weights, parallel,
memory, host, trace, power; hwsim/serving/metrics.py: serving; hwsim/speculative.py:
speculative), the run composes them (run.summarize), and the command line, the report and the
figures read them by attribute. `as_dict()` is the summary as JSON has it (`hwsim run --json`,
the bundle's manifest, a sweep's columns, a what-if's metrics): a part's fields in their order,
under their names, with the same values; tests/test_summary_json_stable.py holds it byte for byte.

A part's own fields are attributes; a map whose keys are data (components of the breakdown,
quantiles of a latency, layers, kernel families, a trace's item kinds) stays a dict.

A part is a class of annotated fields under `@part`: a frozen, keyword-only record as a frozen
dataclass is, declared so to type checkers (dataclass_transform), but made without
dataclasses' generated code, which cost 15 ms of every run's start for these 21 classes (the
start of `hwsim run` is measured: benchmarks/bench_startup.py). This module imports nothing of
hwsim: the process that draws a figure unpickles a RunSummary.
"""

from __future__ import annotations

import typing
from typing import Any, ClassVar

Percentiles = dict          # {"p50": ms, "p99": ms, "mean": ms} (serving: p90 too); hwsim.metrics.percentiles


def _plain(value):
    """A part as its dict; dicts, lists and tuples copied (the summary dict a reader may change
    is never the part's own)."""
    if isinstance(value, Part):
        return value.as_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


class Part:
    """A summary part: its fields (FIELDS, in order) given by keyword, then never changed
    (`replace` makes a changed copy); `as_dict()` its JSON form, `from_dict()` the part again
    from it."""

    FIELDS: ClassVar[tuple[str, ...]] = ()
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    # fields left out of the dict when None (a key only some runs have)
    OMITTED_WHEN_NONE: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **values: Any):
        unknown = values.keys() - set(self.FIELDS)
        missing = [n for n in self.FIELDS if n not in values and n not in self.DEFAULTS]
        if unknown or missing:
            raise TypeError(f"{type(self).__name__}: " + "; ".join(
                [f"no field {', '.join(sorted(unknown))}"] * bool(unknown) + [f"missing {', '.join(missing)}"] * bool(missing)))
        for name in self.FIELDS:
            object.__setattr__(self, name, values[name] if name in values else self.DEFAULTS[name])

    def __setattr__(self, name: str, value: Any):
        raise AttributeError(f"{type(self).__name__} is frozen: make a changed copy with replace()")

    __delattr__ = __setattr__

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.FIELDS)

    __hash__ = None                 # parts hold dicts: equal by value, not hashable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.FIELDS)})"

    def replace(self, **changes: Any):
        """A copy with `changes`."""
        return type(self)(**{**{n: getattr(self, n) for n in self.FIELDS}, **changes})

    def as_dict(self) -> dict:
        out = {}
        for name in self.FIELDS:
            value = getattr(self, name)
            if value is None and name in self.OMITTED_WHEN_NONE:
                continue
            out[name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, d: dict):
        """The part from its dict (a manifest's summary, read back from disk): a key the dict
        lacks (a bundle of an older hwsim) is None, a key the part lacks is ignored."""
        if not isinstance(d, dict):
            raise TypeError(f"{cls.__name__}: not a mapping but {type(d).__name__}")
        hints = typing.get_type_hints(cls)
        return cls(**{n: _parsed(hints[n], d.get(n)) for n in cls.FIELDS})


def _parsed(hint, value):
    """`value` as the field's type has it: a dict as its part where the field holds one."""
    if value is None:
        return None
    parts = [t for t in typing.get_args(hint) or (hint,) if isinstance(t, type) and issubclass(t, Part)]
    if not parts:
        return value
    # a field of one of several parts (a fixed batch's speculative part or a serving run's):
    # the part whose fields the dict has most of
    keys = value.keys() if isinstance(value, dict) else ()
    return max(parts, key=lambda p: len(keys & set(p.FIELDS))).from_dict(value)


@typing.dataclass_transform(kw_only_default=True, frozen_default=True)
def part(cls):
    """A summary part's class: its annotated fields (ClassVars aside), in order, are the part's;
    a field's class attribute is its default."""
    own = cls.__dict__.get("__annotations__", {})
    cls.FIELDS = tuple(n for n, t in own.items() if not str(t).startswith(("ClassVar", "typing.ClassVar")))
    cls.DEFAULTS = {n: cls.__dict__[n] for n in cls.FIELDS if n in cls.__dict__}
    return cls


# -- MoE ------------------------------------------------------------------------------------------

@part
class MoECache(Part):
    policy: str
    capacity_mb: float              # one GPU's SRAM for experts
    expert_mb: float
    hit_rate: float | None          # every GPU's lookups together (expert parallelism: each its own experts)
    hit_rate_by_layer: dict


@part
class MoEPrefetch(Part):
    """The first GPU's prefetches (several GPUs: each prefetches its own experts)."""
    enabled: bool
    predictor: str
    precision: float | None
    recall: float | None
    bytes_per_step: float
    wasted_bytes_per_step: float
    expert_load_wait_ms: float


@part
class MoESummary(Part):
    """Routing, dispatch, SRAM residency, prefetch and channel balance (run.moe_summary)."""
    routing: str
    distinct_experts_per_layer: float
    expected_distinct_uniform: float
    active_param_fraction: float
    placement: str
    channel_imbalance: float
    expert_stack_imbalance: float
    router_in_sram: bool
    cache: MoECache
    prefetch: MoEPrefetch


# -- KV cache -------------------------------------------------------------------------------------

@part
class KVSummary(Part):
    """What the KV format stores, saves and costs in accuracy (run.kv_summary)."""
    effective_bits_per_element: float
    bytes_per_token: float
    effective_bandwidth_multiplier: float
    byte_ratio: float
    attention_speedup: float | None
    attention_rel_error: float
    max_context_tokens_fitting: int
    dequant: str
    kernel: str | None
    attention_speedup_by_kernel: dict | None
    kernel_basis: dict
    kernel_family: str | None       # the family attention_speedup came from (None: nothing dequantizes)
    verdicts: dict | None           # naive, best measured, native decoder (dequant_kernels.verdicts)


# -- weights --------------------------------------------------------------------------------------

@part
class TensorFormat(Part):
    """One tensor class's stored format (hwsim.model.weight_format.WeightFormat.summary)."""
    format: str
    bits_per_weight: float
    group_size: int
    scale_format: str
    dequant: str


@part
class WeightsSummary(Part):
    """Each tensor class's stored format and the bytes of all weights (run.weights_summary)."""
    experts: TensorFormat
    attention: TensorFormat
    embeddings: TensorFormat
    moe_schedule: str
    bytes: float
    bits_per_weight: float
    dequant: dict                   # tensor class -> its dequant
    kernel: dict                    # tensor class -> its dequant kernel family (issue 31)
    expert_gemm_speedup_by_kernel: dict | None
    kernel_basis: dict
    kernel_family: str | None       # the family expert_gemm_speedup came from (None: no expansion)
    expert_gemm_speedup: float | None
    expert_gemm_kernel: dict | None  # family -> the kernel its speedup came from (fast: fast-w4a16 or gemlite)
    verdicts: dict | None           # naive, best measured, native decoder (dequant_kernels.verdicts)


# -- several GPUs, memory -------------------------------------------------------------------------

@part
class ParallelSummary(Part):
    """The layout, one GPU's memory, and the time between GPUs (run.parallel_summary)."""
    gpus: int
    tp: int
    ep: int
    dp_attention: bool
    per_gpu_memory_gb: float
    fits: bool
    comm_ms_per_step: float
    all_to_all_ms: float
    all_reduce_ms: float
    gpu_load_imbalance: float
    wait_for_slowest_ms: float
    overlap_fraction: float


@part
class MemorySummary(Part):
    """One GPU's memory in GB (run.memory_summary)."""
    weights: float
    kv_cache: float
    activations: float
    total: float
    capacity: float


# -- host, imported trace, power, the simulator ----------------------------------------------------

@part
class HostSummary(Part):
    """The host's time, launches and syncs a step, and its share of the critical path (run.host_summary)."""
    busy_ms: float
    launches: float
    syncs: float
    critical_path_ms: float
    critical_share: float


@part
class TraceSummary(Part):
    """An imported kernel trace (run.trace_summary, docs/traces.md): the trace's own report
    (hwsim.ktrace.timeline), first in the dict, then where it was traced and what is rescaled."""
    report: dict
    path: str
    host_profile: str
    traced_point: dict
    not_rescaled: int
    collectives: dict

    def as_dict(self) -> dict:
        out = _plain(self.report)
        out.update({n: _plain(getattr(self, n)) for n in self.FIELDS if n != "report"})
        return out

    @classmethod
    def from_dict(cls, d: dict):
        if not isinstance(d, dict):
            raise TypeError(f"{cls.__name__}: not a mapping but {type(d).__name__}")
        own = [n for n in cls.FIELDS if n != "report"]
        return cls(report={k: v for k, v in d.items() if k not in own}, **{k: d.get(k) for k in own})


@part
class PowerSummary(Part):
    """The watts the repeated passes draw and the clock they settle at (run.power_summary)."""
    watts: float
    limit_w: float
    sm_clock_mhz: float
    max_clock_mhz: float
    watts_at_max_clock: float | None
    throttled: bool
    joules_per_token: float | None


@part
class SimSummary(Part):
    """The simulator's own figures: events, kernels, its wall time, tokens, version."""
    events: int
    kernels: int
    replayed_kernels: int
    wall_s: float
    simulated_tokens: int
    version: str


# -- serving --------------------------------------------------------------------------------------

@part
class SwapSummary(Part):
    """Swap preemption's copies to the host and back (serving.metrics.swap_summary)."""
    link: str
    copies: int
    bytes_out: float
    bytes_in: float
    ms: float


@part
class PrefillTier(Part):
    gpus: int
    utilisation: float
    iterations: int
    queue_ms: Percentiles | None
    prompt_tokens_per_iteration: float


@part
class DecodeTier(Part):
    gpus: int
    utilisation: float
    iterations: int
    queue_ms: Percentiles | None
    batch_mean: float


@part
class Tiers(Part):
    """Disaggregated serving's two tiers (serving.metrics.tiers_summary)."""
    prefill: PrefillTier
    decode: DecodeTier


@part
class KVTransferSummary(Part):
    """The KV transfers from the prefill tier to the decode tier (serving.metrics.tiers_summary)."""
    link: str
    topology: str
    transfers: int
    ms: Percentiles | None
    bytes_total: float
    bytes_mean: float


@part
class EngineSummary(Part):
    """A real engine's scheduler on hwsim's step clock (hwsim/serving/engines/, docs/serving.md)."""
    kind: str                       # workload.engine.kind
    version: str                    # the engine's package version
    config: dict                    # its config as resolved by the engine (num_blocks, max_batch_tokens, ...)
    cuda_graph: bool                # as the engine decided on a CUDA device
    async_batching: bool
    host: str                       # the engine host profile (or host_trace) its host time came from
    steps: int
    step_ms: Percentiles | None     # each step's wall time (device + host on the critical path)
    device_ms_total: float
    host_ms_total: float            # the host's busy time, on the critical path or not
    host_ms: dict                   # the host's parts summed: schedule, launch, plan, sample, device_wait
    plans_built: int                # attention plans built for new shapes (eager)
    bucket_shapes: int              # distinct shape buckets simulated by the step clock


@part
class ServingSummary(Part):
    """Request-level serving (serving.metrics.serving_summary, docs/metrics.md)."""
    throughput_tok_s: float
    slo_attainment: float | None
    goodput_rps: float
    queue_ms_p99: float | None
    requests_completed: int
    requests_rejected: int
    e2e_ms: Percentiles | None
    queue_ms: Percentiles | None
    offered_rps: float
    kv_blocked_ms: float
    iterations: int
    iteration_shapes_simulated: int
    prefix_hit_rate: float
    preemptions: int
    makespan_s: float
    swap: SwapSummary | None
    tiers: Tiers | None
    kv_transfer: KVTransferSummary | None
    engine: EngineSummary | None = None       # a real engine's scheduler ran (workload.engine)
    OMITTED_WHEN_NONE: ClassVar[tuple[str, ...]] = ("engine",)


@part
class Served(Part):
    """What a serving run reports (serving.metrics.serving_summary): its own inter-token and
    first-token latencies, which replace the fixed batch's in the RunSummary, and its part."""
    itl_ms: Percentiles | None
    ttft_ms: Percentiles | None
    serving: ServingSummary


# -- speculative decoding -------------------------------------------------------------------------

@part
class SpeculativeSummary(Part):
    """Speculative decoding or MTP (hwsim.speculative.Speculation.summary)."""
    method: str
    tokens: int
    acceptance: list
    draft_model: str | None
    query_tokens_per_sequence: int
    expected_tokens_per_step: float
    ms_per_step: float
    ms_per_accepted_token: float
    tokens_per_s_per_sequence: float
    draft_ms_per_step: float
    verify_ms_per_step: float
    experts_per_layer: float
    experts_per_layer_first_token: float
    extra_experts_per_layer: float


@part
class ServingSpeculativeSummary(Part):
    """Speculative decoding or MTP in a serving run (hwsim.serving.speculation.ServingSpeculation
    .summary): what the iterations' verifications accepted, against what was configured, and the
    draft work's share of the iterations' time. Its ITL per accepted token is the run's itl_ms."""
    method: str
    tokens: int
    acceptance: list                     # configured, per drafted position
    draft_model: str | None
    query_tokens_per_sequence: int
    expected_tokens_per_step: float      # configured: 1 + sum_j prod_{i<=j} a_i
    verifications: int                   # a decoding sequence in an iteration, each
    acceptance_measured: list            # per position: accepted / reached (None: never reached)
    draft_acceptance_rate: float | None  # accepted drafts / drafted tokens
    accepted_tokens_per_verification: float | None
    tokens_per_verification: float | None   # 1 + the accepted drafts (the reply's end not cut)
    tokens_per_step: float | None        # tokens an iteration that verified gave its sequences
    ms_per_step: float                   # an iteration, draft passes and verification
    draft_ms_per_step: float
    verify_ms_per_step: float
    draft_share: float                   # of the iterations' time, the draft passes'


# -- the run --------------------------------------------------------------------------------------

@part
class RunSummary(Part):
    """The whole run's summary (run.summarize): the scenario, its latencies and breakdown, and
    each subsystem's part. `trace`, `serving` and `speculative` are keys only the runs that
    have them carry; `moe`, `ttft_ms`, `topology` and `power` are null where the run has none."""
    OMITTED_WHEN_NONE: ClassVar[tuple[str, ...]] = ("trace", "serving", "speculative")

    scenario: str
    hardware: str
    hardware_uncertainty: str
    model: str
    seed: int
    budget_ms: float
    batch_size: int | None          # None: a serving run (iterations batch what is running)
    context_tokens: int | None
    launch: str
    itl_ms: Percentiles
    ttft_ms: Percentiles | None
    within_budget: float | None
    breakdown_ms: dict              # component -> ms per step
    bytes: dict                     # what is moved -> bytes per step
    kernels_per_step: float
    active_experts_per_layer: float
    weights_gb: float
    kv: KVSummary
    moe: MoESummary | None
    weights: WeightsSummary
    parallel: ParallelSummary
    topology: str | None            # the system of several GPUs
    memory_per_gpu_gb: MemorySummary
    warnings: list
    device_busy_ms: float
    host: HostSummary
    trace: TraceSummary | None = None
    sim: SimSummary
    serving: ServingSummary | None = None
    speculative: SpeculativeSummary | ServingSpeculativeSummary | None = None
    power: PowerSummary | None = None

    def replace(self, **changes: Any) -> "RunSummary":
        """A copy with `changes`; `wall_s` and `simulated_tokens` change the sim part's."""
        sim = {k: changes.pop(k) for k in ("wall_s", "simulated_tokens") if k in changes}
        if sim:
            changes["sim"] = changes.get("sim", self.sim).replace(**sim)
        return super().replace(**changes)

