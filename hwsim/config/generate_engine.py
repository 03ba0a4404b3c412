"""`workload.engine` of a fixed-batch decode: `kind: hf-generate`, transformers' generate() loop
decoding one static batch (eager, one token a sequence a step), its cache named as the library
names it (transformers 5.17 GenerationConfig's `cache_implementation` and `cache_config`, whose
fields are QuantizedCache's own: backend, nbits, axis_key, axis_value, q_group_size,
residual_length). The cache maps onto hwsim's `kv_cache` (cache_kv); the host that issues the
step is hwsim/serving/engines/generate_host.py's.

A serving workload's engine (a real engine's scheduler: hwsim, hf-transformers, sglang) is
hwsim.config.scenario.Engine; generate() has no scheduler, so it is fixed-batch decode's engine.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from hwsim.config.strict import Strict

HF_GENERATE = "hf-generate"


class QuantizedCacheFields(Strict):
    """QuantizedCache's fields (transformers 5.17 cache_utils), at the library's defaults."""
    backend: Literal["hqq"] = Field(description="the quantization backend (the library's default, quanto, is "
                                                "not modelled: its int2/int4 kernels are not HQQ's torch ops)")
    nbits: Literal[1, 2, 4, 8] = Field(4, description="bits a code (HQQ's uint8 packings)")
    axis_key: Literal[0, 1] = Field(0, description="axis the keys are grouped along (hwsim costs both alike)")
    axis_value: Literal[0, 1] = Field(0, description="axis the values are grouped along (hwsim costs both alike)")
    q_group_size: int = Field(64, ge=1, description="elements sharing one scale and zero point")
    residual_length: int = Field(128, ge=1, description="the latest tokens kept in bf16 before quantizing")


class GenerateConfig(Strict):
    cache_implementation: Literal["dynamic", "quantized"] = Field(
        "dynamic", description="dynamic: DynamicCache (bf16, grown by a cat each step); quantized: QuantizedCache")
    cache_config: QuantizedCacheFields | None = Field(None, description="quantized: QuantizedCache's fields")

    @model_validator(mode="after")
    def _cache_config_is_quantized(self):
        if (self.cache_implementation == "quantized") != (self.cache_config is not None):
            raise ValueError("cache_implementation quantized takes a cache_config (backend hqq, nbits, ...); "
                             "dynamic takes none")
        return self


class GenerateEngine(Strict):
    kind: Literal["hf-generate"] = Field(description="transformers' generate() loop over one static batch")
    config: GenerateConfig = Field(default_factory=GenerateConfig, description="generate()'s cache, under "
                                   "the library's names: cache_implementation, cache_config")
    host: str = Field("hf-transformers-h200", description="engine host profile (hardware_profiles/engine_hosts/) "
                      "whose generate_issue_us and generate_plan_ms issue each step")
    attention_plans: Literal["per-step", "built"] = Field(
        "per-step", description="per-step: cuDNN SDPA builds a plan for each new KV length, every step in a "
                                "fresh process; built: an earlier run in the same process built them (as "
                                "calibration/measure_quantized_cache.py runs bf16 first at the same lengths)")

    @field_validator("kind", mode="before")
    @classmethod
    def _a_loop_not_a_scheduler(cls, kind):
        if kind != HF_GENERATE:
            raise ValueError(f"fixed-batch decode's engine is hf-generate (transformers' generate()); {kind} "
                             "schedules arriving requests: set workload.arrivals (serving)")
        return kind

    @property
    def bits(self) -> int | None:
        """The quantized cache's bits (None: the bf16 DynamicCache)."""
        c = self.config.cache_config
        return None if c is None else c.nbits


def cache_kv(config: dict) -> dict | None:
    """The kv_cache block of a raw hf-generate config whose cache is quantized (None: bf16, or a
    config the schema will refuse)."""
    try:
        c = GenerateConfig.model_validate(config).cache_config
    except ValueError:
        return None
    if c is None:
        return None
    return {"bits": c.nbits, "group_size": c.q_group_size, "scale_format": "fp16", "zero_point": True,
            "recent": {"tokens": c.residual_length, "bits": 16}, "dequant": "unfused", "expansion": "hqq"}
