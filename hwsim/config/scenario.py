"""Scenario schema: what to simulate. Every default lives here and nowhere else.

Public contract (scripts outside the repo use these keys): `hardware`, `model`, `seed`,
`budget_ms`, `workload.batch_size`, `workload.context_tokens`, `workload.decode_steps`,
`runtime.launch`.
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

import numpy as np
from pydantic import Field, PlainValidator, field_validator, model_validator

from hwsim.config import dequant as dequant_type, weight_storage
from hwsim.config.dequant import KernelFamilyName as KernelFamily, kernel_dequant
from hwsim.config.kv_cache import (  # noqa: F401  (the kv_cache block, re-exported for its readers)
    KV_PRESETS, AnyKvCache, Bf16Kv, Fp8Kv, IntKv, KvCache, QuantizedKv, VqKv, kv_cache)
from hwsim.config.generate_engine import HF_GENERATE, GenerateEngine, cache_kv
from hwsim.config.names import SafeName
from hwsim.config.strict import Strict
from hwsim.config.variants import Variant, one_of, one_of_modes
from hwsim.config.weight_storage import WeightFormatName
from hwsim.model.blocks import ATTENTION_KERNELS, MOE_SCHEDULES


def _needs_trace_path(block, what: str):
    """A block with kind `trace` must name its CSV."""
    if block.kind == "trace" and not block.trace:
        raise ValueError(f"{what} kind trace needs a trace: CSV path")
    return block


class Lengths(Variant):
    """A token-count distribution (prompt or output lengths), one class per `kind`."""

    max_tokens: int = Field(32768, ge=1, description="lengths are clipped to this")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` lengths, clipped to 1..max_tokens."""
        return np.clip(self._draw(rng, n), 1, self.max_tokens).astype(int)


class FixedLengths(Lengths):
    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(512, ge=1, description="the length")

    def _draw(self, rng, n):
        return np.full(n, self.tokens)

    def mean(self) -> float:
        return min(self.tokens, self.max_tokens)

    def longest(self) -> int:
        return min(self.tokens, self.max_tokens)


class UniformLengths(Lengths):
    kind: Literal["uniform"] = "uniform"
    low: int = Field(1, ge=1, description="smallest length")
    high: int = Field(1024, ge=1, description="largest length")

    @model_validator(mode="after")
    def _check(self):
        if self.low > self.high:
            raise ValueError("uniform lengths need low <= high")
        return self

    def _draw(self, rng, n):
        return rng.integers(self.low, self.high + 1, size=n)

    def mean(self) -> float:
        return min((self.low + self.high) / 2, self.max_tokens)

    def longest(self) -> int:
        return min(self.high, self.max_tokens)


class LognormalLengths(Lengths):
    kind: Literal["lognormal"] = "lognormal"
    tokens: int = Field(512, ge=1, description="the median")
    sigma: float = Field(0.8, gt=0, description="sigma of log(length)")

    def _draw(self, rng, n):
        return np.round(self.tokens * np.exp(self.sigma * rng.standard_normal(n)))

    def mean(self) -> float:
        return min(self.tokens * math.exp(min(self.sigma, 10.0) ** 2 / 2), self.max_tokens)

    def longest(self) -> int:
        return self.max_tokens


AnyLengths = one_of(FixedLengths, UniformLengths, LognormalLengths, default=FixedLengths,
                    order=("kind", "tokens", "low", "high", "sigma", "max_tokens"))


class Arrivals(Variant):
    """How requests arrive, one class per `kind`; any kind but `none` turns on the serving simulation."""
    serving: ClassVar[bool] = True


class NoArrivals(Arrivals):
    """Fixed-batch decode: no requests arrive."""
    kind: Literal["none"] = "none"
    serving: ClassVar[bool] = False


class _Requests(Arrivals):
    requests: int = Field(64, ge=1, description="requests to simulate (trace: at most this many)")


class _OpenLoop(_Requests):
    rate_per_s: float = Field(1.0, gt=0, description="mean arrivals per second")


class PoissonArrivals(_OpenLoop):
    kind: Literal["poisson"] = "poisson"

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Exponential gaps between arrivals."""
        return rng.exponential(1.0 / self.rate_per_s, size=n)


class GammaArrivals(_OpenLoop):
    kind: Literal["gamma"] = "gamma"
    cv: float = Field(2.0, gt=0, description="coefficient of variation of inter-arrival gaps (>1 = bursty)")

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Gamma-distributed gaps of the given CV."""
        mean = 1.0 / self.rate_per_s
        shape = 1.0 / self.cv ** 2            # gamma: CV = 1/sqrt(shape)
        return rng.gamma(shape, mean / shape, size=n)


class ClosedArrivals(_Requests):
    kind: Literal["closed"] = "closed"
    users: int = Field(8, ge=1, description="concurrent users")
    think_ms: float = Field(1000.0, ge=0, description="think time between a reply and the next request")


class TraceArrivals(_Requests):
    kind: Literal["trace"] = "trace"
    trace: str | None = Field(None, description="a request trace, hwsim's CSV (arrival_s, "
                              "prompt_tokens, output_tokens), Azure LLM inference, BurstGPT or "
                              "Mooncake JSONL (docs/serving.md)")
    rate_scale: float = Field(1.0, gt=0, description="replay arrivals this many times as fast")
    start: float = Field(0.0, ge=0, description="skip requests before this many seconds of trace time")
    duration: float | None = Field(None, gt=0, description="keep requests within this many seconds "
                                                           "after start (default: to the end)")

    @model_validator(mode="after")
    def _check(self):
        return _needs_trace_path(self, "arrivals")


AnyArrivals = one_of(NoArrivals, PoissonArrivals, GammaArrivals, ClosedArrivals, TraceArrivals,
                     default=NoArrivals, order=("kind", "rate_per_s", "cv", "users", "think_ms", "trace",
                                                "requests", "rate_scale", "start", "duration"))


class Disaggregation(Strict):
    """Prefill/decode disaggregation (DistServe, Splitwise, vLLM's disaggregated prefill): prompts
    run on prefill GPUs, each prompt's KV cache is sent over the topology's links to a decode
    GPU, which generates the rest of the reply (docs/serving.md)."""
    prefill_gpus: int = Field(1, ge=1, le=64, description="GPUs that only prefill, one serving instance each")
    decode_gpus: int = Field(1, ge=1, le=64, description="GPUs that only decode, one serving instance each")
    link: Literal["nvlink", "network"] = Field(
        "nvlink", description="nvlink: both tiers on one node, KV over the scale-up ports (NVSwitch); "
                              "network: the tiers on two nodes, KV through their NICs")
    topology: str | None = Field(None, description="topology profile whose ports time the KV transfer "
                                                   "(default: parallel.topology, else the HGX board of "
                                                   "the hardware, hgx-h200-8 for h200-sxm)")


class Engine(Strict):
    """Which serving engine's scheduler runs the requests (docs/serving.md): hwsim's own
    vLLM-like loop, or a real engine's scheduler on CPU with hwsim's step clock as its clock."""
    kind: Literal["hwsim", "hf-transformers", "sglang"] = Field(
        "hwsim", description="hwsim: the built-in vLLM-like loop; hf-transformers: transformers' "
                             "ContinuousBatchingManager (pip install 'hwsim[hf-engine]'); sglang: SGLang 0.5.4's "
                             "Scheduler (CPU-only install: docs/serving.md)")
    config: dict = Field(default_factory=dict, description="the engine's own config fields under their own "
                         "names (hf-transformers: ContinuousBatchingConfig's block_size, num_blocks, "
                         "max_batch_tokens, max_requests_per_batch, use_cuda_graph, use_async_batching, "
                         "scheduler_type, ...; sglang: ServerArgs' chunked_prefill_size, max_running_requests, "
                         "max_total_tokens, schedule_policy, page_size, ...); the engine's defaults for the rest")
    host_trace: str | None = Field(None, description="a torch.profiler trace of a short burst of the engine: "
                                   "its host's launch, plan and scheduling times (docs/serving.md)")
    host: str | None = Field(None, description="engine host profile (hardware_profiles/engine_hosts/); "
                             "default: the engine's own (hf-transformers-h200; sglang: none yet, device time only)")

    @field_validator("kind", mode="before")
    @classmethod
    def _a_scheduler_not_a_loop(cls, kind):
        if kind == HF_GENERATE:
            raise ValueError("hf-generate decodes one static batch: fixed-batch decode (workload.arrivals kind none)")
        return kind

    @property
    def builtin(self) -> bool:
        """hwsim's own loop, not a real engine's scheduler."""
        return self.kind == "hwsim"

    @model_validator(mode="after")
    def _hwsim_takes_no_config(self):
        if self.builtin and (self.config or self.host_trace or self.host):
            raise ValueError("engine kind hwsim (the built-in loop) is configured by workload's own keys "
                             "(max_batch_size, token_budget, ...): config, host_trace and host are for a real engine")
        return self


class KernelTrace(Strict):
    """A torch.profiler (Kineto) trace of one decode step of any engine, imported as the
    schedule (docs/traces.md); batch_size and context_tokens say the point it was recorded at."""
    path: str = Field(description="the trace, .json or .json.gz, as torch.profiler writes it")
    batch_size: int = Field(ge=1, description="sequences the traced step decoded")
    context_tokens: int = Field(ge=1, description="KV length each traced sequence held")
    host: str = Field("as-traced", description="host profile (hardware_profiles/hosts/) that issues its ops")
    group_size: int = Field(1, ge=1, le=4096, description=(
        "GPUs in the traced collectives' group (the traced rank's tensor-parallel size): above 1, "
        "its NCCL calls are re-timed by hwsim's collective model on the chip's topology "
        "(parallel.topology if set); 1 holds them as traced"))
class Speculative(Variant):
    """Speculative decoding (a draft model) or multi-token prediction (DeepSeek-V3's MTP module):
    each decode step drafts `tokens` tokens per sequence, then the model verifies all of them
    and the sequence's own next token in one pass of tokens + 1 query tokens per sequence
    (docs/whatif.md). Fixed-batch decode or colocated serving (continuous batching) on one GPU.
    One class per `method`."""
    tokens: int = Field(ge=1, le=16, description="K: tokens drafted per sequence and step (plain decode: no "
                                                 "workload.speculative)")
    acceptance: float | list[float] = Field(
        0.8, description="the chance a drafted token is accepted given every one before it was: one "
                         "rate for every position, or one per position (K of them)")

    @model_validator(mode="after")
    def _check(self):
        rates = self.acceptance if isinstance(self.acceptance, list) else [self.acceptance]
        if any(not 0 <= a <= 1 for a in rates):
            raise ValueError("every acceptance rate must be between 0 and 1")
        if isinstance(self.acceptance, list) and len(self.acceptance) != self.tokens:
            raise ValueError(f"acceptance lists {len(self.acceptance)} rates for {self.tokens} drafted tokens; "
                             f"give one per position, or one rate")
        return self

    def rates(self) -> list[float]:
        """The acceptance rate of each drafted position."""
        a = self.acceptance
        return list(a) if isinstance(a, list) else [a] * self.tokens


class DraftSpeculation(Speculative):
    method: Literal["draft"] = Field("draft", description="draft: a smaller model drafts, one decode step per "
                                                          "drafted token")
    draft: str | None = Field(None, description="the draft model, a built-in name or a model-shape YAML")

    @model_validator(mode="after")
    def _named(self):
        if not self.draft:
            raise ValueError("method draft needs draft: the draft model's name")
        return self


class MtpSpeculation(Speculative):
    method: Literal["mtp"] = Field("mtp", description="mtp: the model's own multi-token-prediction module (one "
                                                      "extra transformer layer, its embedding and LM head shared) "
                                                      "runs once per drafted token")


AnySpeculative = one_of(DraftSpeculation, MtpSpeculation, default=None, tag="method",
                        order=("method", "tokens", "acceptance", "draft"))


class Workload(Variant):
    """What runs: fixed-batch decode (FixedBatchWorkload: arrivals kind none) or serving
    (ServingWorkload: requests arrive); the serving keys are keys of serving only."""
    batch_size: int = Field(1, ge=1, description="sequences decoded together in one step")
    context_tokens: int = Field(4096, ge=1, description="KV length each sequence holds at the first step")
    decode_steps: int = Field(8, ge=1, description="decode steps simulated (one token per sequence each)")
    prompt_tokens: int = Field(0, ge=0, description="if > 0, also simulate one prefill of this many tokens")
    arrivals: AnyArrivals = NoArrivals()
    kernel_trace: KernelTrace | None = Field(
        None, description="a profiler trace of your engine's decode step as the schedule "
                          "(docs/traces.md); batch_size and context_tokens default to its point")
    speculative: AnySpeculative | None = Field(
        None, description="speculative decoding or MTP: each step verifies drafted tokens (unset: one "
                          "token per sequence and step)")

    @property
    def serving(self) -> bool:
        """Requests arrive (any arrivals but none): the serving simulation, not fixed-batch decode."""
        return self.arrivals.serving

    @model_validator(mode="before")
    @classmethod
    def _trace_point(cls, data):
        """The predicted point defaults to the trace's own."""
        kt = data.get("kernel_trace") if isinstance(data, dict) else None
        if isinstance(kt, dict):
            data = {"batch_size": kt.get("batch_size", 1), "context_tokens": kt.get("context_tokens", 4096),
                    **data}
        return data

    @model_validator(mode="after")
    def _trace_decodes(self):
        if self.kernel_trace is not None and (self.prompt_tokens or self.arrivals.serving):
            raise ValueError("kernel_trace is one traced decode step: fixed-batch decode only "
                             "(no prompt_tokens, no arrivals)")
        return self


class FixedBatchWorkload(Workload):
    """batch_size sequences decode decode_steps steps together (arrivals kind none)."""
    engine: GenerateEngine | None = Field(
        None, description="the loop that issues the steps: unset, hwsim's own; hf-generate, transformers' "
                          "generate() (its cache under the library's names; hwsim/config/generate_engine.py)")

    @model_validator(mode="after")
    def _generate_decodes(self):
        if self.engine is not None and (self.kernel_trace is not None or self.speculative is not None):
            raise ValueError("engine hf-generate runs hwsim's schedule of plain decode steps: not with "
                             "kernel_trace or speculative")
        return self


class ServingWorkload(Workload):
    """Requests arrive, are batched iteration by iteration and served (docs/serving.md)."""
    prompt: AnyLengths = FixedLengths(tokens=512)
    output: AnyLengths = FixedLengths(tokens=128)
    max_batch_size: int = Field(32, ge=1, description="sequences in one iteration (continuous batching)")
    token_budget: int = Field(2048, ge=1, description="tokens per iteration, decodes plus prefill chunk")
    chunked_prefill: bool = Field(True, description="split long prompts over iterations, mixed with decodes")
    prefix_caching: bool = Field(True, description="reuse resident KV blocks of equal prompt prefixes "
                                 "(a trace's hash_ids) instead of prefilling them again")
    kv_allocation: Literal["whole", "as_needed"] = Field(
        "whole", description="whole: admit a request only with KV for its prompt and whole reply "
                             "(never preempted); as_needed: KV grows a token at a time, as vLLM's "
                             "paged cache does, and when it runs out the latest admitted request is "
                             "preempted and later recomputed")
    preemption: Literal["recompute", "swap"] = Field(
        "recompute", description="as_needed, when KV runs out: recompute drops the preempted request's KV "
                                 "and prefills it again; swap copies it to host memory over host_link "
                                 "and back when readmitted (vLLM's two modes)")
    host_link: Literal["pcie-gen5", "nvlink-c2c"] = Field(
        "pcie-gen5", description="swap: the GPU's link to host memory (PCIe Gen5 x16; NVLink-C2C as on GH200)")
    ttft_target_ms: float = Field(1000.0, gt=0, description="goodput: a request must reach its first token by this")
    itl_target_ms: float | None = Field(None, gt=0, description="goodput: every gap within this (default budget_ms)")
    disaggregation: Disaggregation | None = Field(
        None, description="prefill and decode on separate GPUs, the KV cache sent between "
                          "them (unset: every GPU does both, colocated)")
    engine: Engine = Field(default_factory=Engine, description="the engine whose scheduler runs "
                           "the requests (kind hwsim, hf-transformers or sglang; docs/serving.md)")

    @model_validator(mode="after")
    def _swap_needs_preemption(self):
        if self.preemption == "swap" and self.kv_allocation != "as_needed":
            raise ValueError("preemption: swap needs kv_allocation: as_needed (with whole, nothing is preempted)")
        return self

    @model_validator(mode="after")
    def _speculative_is_colocated(self):
        if self.speculative and self.disaggregation:
            raise ValueError("workload.speculative is simulated on colocated serving (and fixed-batch decode); "
                             "not with workload.disaggregation")
        return self

    @model_validator(mode="after")
    def _engine_is_the_loop(self):
        if not self.engine.builtin and self.disaggregation:
            raise ValueError("workload.disaggregation is simulated by the built-in loop only (engine kind hwsim)")
        return self

    @model_validator(mode="after")
    def _disaggregated_kv_is_whole(self):
        if self.disaggregation and self.kv_allocation != "whole":
            raise ValueError("workload.disaggregation reserves each request's whole KV cache on its decode "
                             "GPU: kv_allocation as_needed (preemption) is not simulated with it")
        return self


FIXED_BATCH = "fixed-batch decode (workload.arrivals kind none)"


def _run_mode(value) -> str:
    arrivals = value.get("arrivals") if isinstance(value, dict) else getattr(value, "arrivals", None)
    kind = arrivals.get("kind", "none") if isinstance(arrivals, dict) else getattr(arrivals, "kind", "none")
    return FIXED_BATCH if kind == "none" else "serving"


AnyWorkload = one_of_modes(
    {FIXED_BATCH: FixedBatchWorkload, "serving": ServingWorkload}, _run_mode,
    order=("batch_size", "context_tokens", "decode_steps", "prompt_tokens", "arrivals", "prompt", "output",
           "max_batch_size", "token_budget", "chunked_prefill", "prefix_caching", "kv_allocation", "preemption",
           "host_link", "ttft_target_ms", "itl_target_ms", "disaggregation", "engine", "kernel_trace",
           "speculative"))


def _sm_clock(value: object) -> str | float:
    """One clear error for the one key, rather than one per member of a union."""
    if value in ("settled", "max"):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    raise ValueError("expected 'settled', 'max' or a clock in MHz above 0")


SmClock = Annotated[str | float, PlainValidator(_sm_clock)]


class Runtime(Strict):
    launch: Literal["graph", "eager"] = Field("graph", description="CUDA-graph replay or eager launches")
    fidelity: Literal["tile", "wave", "kernel"] = Field(
        "kernel", description="tile: one memory/compute event group per thread block; "
                              "wave: one per wave of thread blocks; kernel: one per kernel "
                              "(the same resource model and timings as wave, fewer events)")
    reuse: bool = Field(True, description="kernel fidelity: simulate each distinct kernel once per "
                                         "run and replay it (identical results, docs/performance.md)")
    kernel_records: int = Field(
        32, ge=-1, description="decode steps, from the first, whose per-kernel records are kept for "
                               "events.parquet, the trace and the Gantt chart (-1: every step); every "
                               "step's latency and breakdown are kept regardless. Long runs at large "
                               "batch would otherwise hold millions of records")
    attention_kernel: Literal[tuple(ATTENTION_KERNELS)] = Field(
        "flash", description="bf16 decode attention: flash = FlashAttention-2 (the measured "
                             "schedule; MMA-bound from about 27 sequences at 8 KV heads; for MLA a "
                             "fused latent kernel as FlashMLA), cudnn = cuDNN's SDPA kernel, PyTorch's "
                             "default choice on the H200 (bandwidth-bound there), eager = MLA as "
                             "DeepSeek's reference code runs it in plain PyTorch (batched matmuls, "
                             "softmax, copies; MLA models only)")
    sm_clock: SmClock = Field(
        "settled", description="settled: the clock the profile's power limit settles the SMs at for "
                               "this run's passes, repeated back to back (hwsim/hw/power.py; the "
                               "maximum clock when they stay under the limit, or the profile has no "
                               "power block); max: the maximum clock, as the first replays after idle "
                               "run; a number: that clock in MHz (a what-if: a locked clock)")
    moe_schedule: Literal[tuple(MOE_SCHEDULES)] = Field(
        "per-expert", description="per-expert: gather, GEMMs, scatter for each active expert "
                                  "(the measured PyTorch schedule); grouped: torch._grouped_mm as "
                                  "torchtitan runs it; fused: a Triton fused-MoE kernel in vLLM's "
                                  "design (docs/moe.md; all three measured on the H200)")


class Routing(Variant):
    """How tokens pick experts, one class per `kind`."""
    capacity_factor: float | None = Field(None, gt=0, description="cap per expert = ceil(cf x tokens x k / E)")
    overflow: Literal["drop", "reroute"] = "drop"


class UniformRouting(Routing):
    kind: Literal["uniform"] = Field("uniform", description="how tokens pick experts")


class ZipfRouting(Routing):
    kind: Literal["zipf"] = "zipf"
    zipf_exponent: float = Field(1.0, gt=0, description="popularity ~ 1/rank^exponent")
    hot_persist_steps: int = Field(16, ge=1, description="steps the hot-expert ranking persists")
    drift: float = Field(0.25, ge=0, le=1, description="share of the ranking reshuffled at each drift")
    balance: float = Field(0.0, ge=0, le=1, description="load balancing: 0 = raw skew, 1 = uniform")


class TraceRouting(Routing):
    kind: Literal["trace"] = "trace"
    trace: str | None = Field(None, description="CSV of step, layer, token, experts")

    @model_validator(mode="after")
    def _check(self):
        return _needs_trace_path(self, "routing")


AnyRouting = one_of(UniformRouting, ZipfRouting, TraceRouting, default=UniformRouting,
                    order=("kind", "zipf_exponent", "hot_persist_steps", "drift", "balance", "trace",
                           "capacity_factor", "overflow"))


class ExpertCache(Strict):
    policy: Literal["none", "lru", "lfu", "pinned-hot"] = Field(
        "none", description="which experts stay resident in on-chip SRAM between uses")
    capacity_mib: float | None = Field(
        None, gt=0, description="SRAM for experts (default: the profile's L2 x persist_fraction)")
    persist_fraction: float = Field(
        0.75, gt=0, le=1, description="share of the L2 that can be set aside for persisting data "
                                      "(CUDA persisting-L2 limit, about 3/4 on A100/H100)")
    pin_router: bool = Field(
        False, description="keep every layer's router weights (the routing table) in SRAM when they "
                           "fit; the measured PyTorch schedule streams them from HBM")


class Prefetch(Variant):
    """Experts copied into SRAM ahead of their layer, one class per `predictor` (how it guesses them)."""
    enabled: bool = False
    lookahead_layers: int = Field(0, ge=0, le=1, description="0: layer l during its attention; 1: also l+1")


class OraclePrefetch(Prefetch):
    predictor: Literal["oracle"] = "oracle"
    accuracy: float = Field(1.0, ge=0, le=1, description="oracle: share of needed experts predicted")


class PreviousLayerPrefetch(Prefetch):
    """Guesses a layer's experts as the previous layer's: its accuracy is what happens, no key."""
    predictor: Literal["previous-layer"] = "previous-layer"
    accuracy: ClassVar[None] = None


class PreviousTokenPrefetch(Prefetch):
    """Guesses a layer's experts as the previous step's there: its accuracy is what happens, no key."""
    predictor: Literal["previous-token"] = "previous-token"
    accuracy: ClassVar[None] = None


AnyPrefetch = one_of(OraclePrefetch, PreviousLayerPrefetch, PreviousTokenPrefetch, default=OraclePrefetch,
                     order=("enabled", "predictor", "accuracy", "lookahead_layers"), tag="predictor")


TENSOR_CLASSES = ("experts", "attention", "embeddings")


class TensorWeights(Strict):
    """Storage of one tensor class's weights (docs/weights.md); unset keys take the format's own."""
    format: WeightFormatName | None = Field(None, description="unset: the model's default (bf16; "
                                                              "deepseek-v3: fp8)")
    group_size: int | None = Field(None, ge=0, description="weights per scale (0: one per tensor); "
                                                           "default int* 128, mxfp4 32, nvfp4 16, fp8 0")
    scale_format: Literal["bf16", "fp16", "fp32", "fp8", "e8m0"] | None = None
    dequant: Literal["native", "software", "decoder"] | None = Field(
        None, description="native: the tensor core takes it (fp8; fp4 on b200); software: expanded in "
                          "registers (the H200's only way for 4-bit and below); decoder: the what-if "
                          "native sub-byte decoder of the profile")
    kernel: KernelFamily | None = Field(
        None, description="dequant kernel family of a software or decoder class (docs/weights.md): "
                          "naive = tinygemm (measured), fast = calibration/fast_w4a16.py (counts fitted "
                          "on an H100, issue 44), native-decoder = dequant decoder; unset: the "
                          "profile's fastest measured family at one row (naive: tinygemm, issue 44)")

    @property
    def quantized(self) -> bool:
        """Stored in a format other than bf16 (an unset format is the model's: resolved() fills it)."""
        return self.format is not None and weight_storage.of(self.format).quantized

    @property
    def dequant_choice(self) -> str:
        """Who expands the codes: as set, else native for bf16 and fp8 (the tensor core takes
        them), the decoder under kernel native-decoder, software otherwise (a kernel acts on codes only)."""
        if self.dequant is not None:
            return self.dequant
        fam = dequant_type.family(self.kernel)
        if self.format is not None and weight_storage.of(self.format).native_unless_told:
            return "native"
        return fam.is_dequant if fam and fam.is_dequant else "software"


class Weights(Strict):
    """Weight formats per tensor class. `format` etc. at the top set all three classes."""
    format: WeightFormatName | None = None
    group_size: int | None = Field(None, ge=0)
    scale_format: Literal["bf16", "fp16", "fp32", "fp8", "e8m0"] | None = None
    dequant: Literal["native", "software", "decoder"] | None = None
    kernel: KernelFamily | None = None
    experts: TensorWeights = TensorWeights()
    attention: TensorWeights = TensorWeights()
    embeddings: TensorWeights = Field(TensorWeights(), description="embedding table and LM head")

    def resolved(self, cls: str, model_defaults: dict | None = None) -> TensorWeights | None:
        """One tensor class's block over the model's default for it (DeepSeek-V3: fp8): the
        scenario's keys over the checkpoint's, a new format dropping the old one's group and
        scales. None: no format anywhere (bf16)."""
        block, base = getattr(self, cls), (model_defaults or {}).get(cls)
        if base is not None:
            keys = block.model_dump(exclude_none=True)
            if "format" in keys and keys["format"] != base.format:
                base = type(base)()
            block = base.model_copy(update=keys)
        return block if block.format is not None else base if base is not None and base.format is not None else None

    @model_validator(mode="after")
    def _spread(self):
        """Top-level keys apply to every class that does not set its own."""
        top = {k: getattr(self, k) for k in ("format", "group_size", "scale_format", "dequant", "kernel")
               if getattr(self, k) is not None}
        for cls in TENSOR_CLASSES:
            block = getattr(self, cls)
            fill = {k: v for k, v in top.items() if getattr(block, k) is None}
            if fill:
                block = block.model_copy(update=fill)
                object.__setattr__(self, cls, block)
            try:
                kernel_dequant(block.kernel, block.dequant, ("software",))
            except ValueError as exc:
                raise ValueError(f"weights.{cls}: {exc}") from None
        return self


class Moe(Strict):
    routing: AnyRouting = UniformRouting()
    placement: Literal["interleaved", "per-expert"] = Field(
        "interleaved", description="expert weights striped over all HBM channels, or each expert "
                                   "contiguous on the channels of one stack")
    cache: ExpertCache = ExpertCache()
    prefetch: AnyPrefetch = OraclePrefetch()


class Parallel(Strict):
    """Many GPUs (issue 18, docs/multi_gpu.md). Public contract: `gpus`, `tp`, `ep`,
    `dp_attention`, `nodes`. Memory is checked per GPU (hwsim/parallel/memory.py)."""
    gpus: int = Field(1, ge=1, le=4096)
    tp: int = Field(1, ge=1, description="tensor-parallel degree of attention and dense layers")
    ep: int = Field(1, ge=1, description="expert-parallel degree: the routed experts spread over ep GPUs")
    dp_attention: bool = Field(False, description="data-parallel attention: every GPU runs attention "
                                                   "for its own share of the batch (SGLang, DeepSeek)")
    nodes: int = Field(1, ge=1, description="nodes the GPUs are spread over (NVLink within, the NIC between)")
    topology: str | None = Field(None, description="a profile in hardware_profiles/topologies/")
    allow_overcommit: bool = Field(False, description="what-if: run even when a GPU's memory does not "
                                                      "fit, and say so in the output")
    expert_placement: Literal["contiguous", "round-robin", "redundant"] = Field(
        "contiguous", description="routed experts across the ep GPUs: in id order, round-robin, or "
                                  "with redundant copies of the hottest (DeepSeek's EPLB)")
    redundant_experts: int = Field(0, ge=0, description="redundant placement: extra expert copies in "
                                                        "all (a multiple of ep), on top of the experts")
    dispatch_kernel: Literal["deepep-low-latency", "nccl-all-to-all"] = Field(
        "deepep-low-latency", description="what dispatches and combines tokens under data-parallel "
                                          "attention: DeepEP's low-latency kernels (FP8 dispatch) or "
                                          "NCCL's all_to_all_single (bf16), hwsim/parallel/comm_kernels.py")
    micro_batches: int = Field(1, ge=1, le=2, description="2: the batch split in two micro-batches, one "
                               "communicating while the other computes (DeepSeek's and SGLang's overlap)")

    @model_validator(mode="after")
    def _divides(self):
        for key in ("tp", "ep", "nodes"):
            if self.gpus % getattr(self, key):
                raise ValueError(f"parallel.{key} = {getattr(self, key)} does not divide gpus = {self.gpus}")
        if self.redundant_experts % self.ep:
            raise ValueError(f"parallel.redundant_experts = {self.redundant_experts} is not a multiple "
                             f"of ep = {self.ep}")
        if self.redundant_experts and self.expert_placement != "redundant":
            raise ValueError("parallel.redundant_experts needs expert_placement: redundant")
        return self


def _workload_block(data) -> dict:
    """The raw (pre-validation) workload block of a scenario's data, {} where there is none."""
    workload = data.get("workload") if isinstance(data, dict) else None
    return workload if isinstance(workload, dict) else {}


def _runtime_defaults(data: dict, defaults: dict) -> dict:
    """`data` with `defaults` under runtime wherever the scenario's own runtime leaves them unset."""
    runtime = data.get("runtime") or {}
    if not isinstance(runtime, dict):
        return data
    return {**data, "runtime": {**defaults, **runtime}}


class Scenario(Strict):
    name: SafeName = Field("scenario", description="the bundle folder name under reports/ (one path component)")
    description: str = ""
    hardware: str = Field(description="profile name in hardware_profiles/ or a path to a profile YAML")
    hardware_overrides: dict[str, float] = Field(
        default_factory=dict, description="what-if: profile numbers to replace, by dotted path "
                                          "(e.g. hbm.peak_bandwidth_gbps: 8000)")
    model: str = Field(description="built-in model name, a path to a model-shape YAML, or a Hugging Face "
                                   "config.json or its folder (docs/models.md)")
    seed: int = Field(0, ge=0)
    budget_ms: float = Field(10.0, gt=0, description="per-token latency budget")
    workload: AnyWorkload = FixedBatchWorkload()
    runtime: Runtime = Runtime()
    kv_cache: AnyKvCache = Bf16Kv()
    moe: Moe = Moe()
    weights: Weights = Weights()
    parallel: Parallel = Parallel()

    @model_validator(mode="before")
    @classmethod
    def _trace_launch(cls, data):
        """An imported trace's host issues its kernels as it did when traced (eager launches, or
        its own cudaGraphLaunch calls), unless runtime.launch says graph: the host off the path."""
        if _workload_block(data).get("kernel_trace") is None:
            return data
        return _runtime_defaults(data, {"launch": "eager"})

    @model_validator(mode="before")
    @classmethod
    def _hf_engine_runtime(cls, data):
        """transformers 5.17's continuous batching runs a MoE layer's experts with torch's grouped_mm
        (PreTrainedModel.get_correct_experts_implementation's default on CUDA) and launches its
        forward eagerly unless its config turns CUDA graphs on (then replays): so the pass is
        timed, unless runtime says otherwise."""
        engine = _workload_block(data).get("engine")
        if not isinstance(engine, dict) or engine.get("kind") != "hf-transformers":
            return data
        config = engine.get("config") if isinstance(engine.get("config"), dict) else {}
        graphs = config.get("use_cuda_graph")
        graphs = any(graphs) if isinstance(graphs, (list, tuple)) else bool(graphs)
        return _runtime_defaults(data, {"launch": "graph" if graphs else "eager", "moe_schedule": "grouped"})

    @model_validator(mode="before")
    @classmethod
    def _hf_generate(cls, data):
        """transformers' generate() launches each step eagerly and runs SDPA on cuDNN (the H100 and
        H200 HF traces), unless runtime says otherwise; its quantized cache is the kv_cache block
        (hwsim/config/generate_engine.py cache_kv) under the scenario's own kv_cache keys (one that
        changes the storage is refused by the checks: hwsim/config/engine_install.py)."""
        engine = _workload_block(data).get("engine")
        if not isinstance(engine, dict) or engine.get("kind") != HF_GENERATE:
            return data
        data = _runtime_defaults(data, {"launch": "eager", "attention_kernel": "cudnn"})
        kv = cache_kv(engine.get("config") if isinstance(engine.get("config"), dict) else {})
        own = data.get("kv_cache", {})
        if kv is not None and isinstance(own, dict):      # the scenario's keys over the engine's (a what-if:
            data = {**data, "kv_cache": {**kv, **own}}    # expansion one-pass; the checks refuse the rest)
        return data

    @model_validator(mode="before")
    @classmethod
    def _flatten_overrides(cls, data):
        """hardware_overrides may be written nested (as --set writes it) or with dotted keys."""
        if isinstance(data, dict) and isinstance(data.get("hardware_overrides"), dict):
            flat: dict = {}

            def walk(prefix, node):
                for key, value in node.items():
                    path = f"{prefix}.{key}" if prefix else str(key)
                    if isinstance(value, dict):
                        walk(path, value)
                    else:
                        flat[path] = value
            walk("", data["hardware_overrides"])
            data = {**data, "hardware_overrides": flat}
        return data
