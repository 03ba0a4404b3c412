"""Keys changed from their default that cannot change this run (issue 28: a silent no-op is never
acceptable). Each one a scenario sets where it does not act (a zipf exponent under uniform
routing, an arrival rate without arrivals, expert keys on a dense model) becomes one warning
of the run, naming the key and what it needs. tests/test_every_key_matters.py holds every rule
to a run: warned, the key changes nothing; set where it is said to act, it changes the result.
"""

from __future__ import annotations

from typing import Callable

from pydantic import BaseModel

from hwsim.config import dequant as dequant_type
from hwsim.config.scenario import TENSOR_CLASSES, Scenario, TraceArrivals
from hwsim.config.variants import Variant

Acts = Callable[[Scenario, object], bool]     # (scenario, model shape) -> does the key act here


def _drawn_lengths(c, m) -> bool:
    """A serving run that draws prompt and output lengths (a trace has its own)."""
    return c.workload.serving and not isinstance(c.workload.arrivals, TraceArrivals)


def _moe(c, m) -> bool:
    return m.moe is not None


def _sram(c, m) -> bool:
    k = c.moe.cache
    return _moe(c, m) and (k.policy != "none" or c.moe.prefetch.enabled or k.pin_router)


def _prefetch(c, m) -> bool:
    return _moe(c, m) and c.moe.prefetch.enabled


def _quantized_kv(c, m) -> bool:
    return c.kv_cache.quantized


def _software_kv(c) -> bool:
    """KV codes unpacked in registers by the SM inside the attention kernel (dequant software)."""
    d = dequant_type.of(c.kv_cache.dequant)
    return d.on_sm and d.fused


def _counted_kernel(c) -> bool:
    """The KV kernel named is costed by its counted ops per width (fast), not the relayout fit."""
    fam = dequant_type.family(c.kv_cache.kernel)
    return fam is not None and fam.counted


def _weights_kernel(cls: str | None) -> Acts:
    """A kernel family key (one class, None: any): acts where the class's codes are expanded."""
    def acts(c, m):
        blocks = [c.weights.resolved(k, m.weights) for k in ([cls] if cls else TENSOR_CLASSES)]
        return any(b is not None and dequant_type.of(b.dequant_choice).expands for b in blocks)
    return acts


def _weights_class(cls: str | None) -> Acts:
    """A weights key of one tensor class (None: any): acts when that class is stored quantized."""
    def acts(c, m):
        blocks = [c.weights.resolved(k, m.weights) for k in ([cls] if cls else TENSOR_CLASSES)]
        return any(b is not None and b.quantized for b in blocks)
    return acts


def _gpus(c, m) -> bool:
    return c.parallel.gpus > 1


def _gpus_or_trace_group(c, m) -> bool:
    kt = c.workload.kernel_trace
    return _gpus(c, m) or (kt is not None and kt.group_size > 1)


def _expert_parallel(c, m) -> bool:
    return _moe(c, m) and c.parallel.gpus > 1 and c.parallel.ep > 1


# key, or a group ending in "." -> (what it needs, in words; whether it acts). The first match wins.
# A key of one kind of a block (the run mode, arrivals, prompt and output lengths, routing, the
# speculative method, the prefetch predictor, the KV cache's storage: bf16 or int, fp8, vq codes) needs no rule: set
# under another it is an unknown key at load (hwsim.config.variants).
RULES: list[tuple[str, str, Acts]] = [
    ("workload.prompt.", "serving arrivals that draw prompt lengths (poisson, gamma, closed)", _drawn_lengths),
    ("workload.output.", "serving arrivals that draw output lengths (poisson, gamma, closed)", _drawn_lengths),
    ("workload.host_link", "workload.preemption swap", lambda c, m: c.workload.preemption == "swap"),
    ("runtime.moe_schedule", "a MoE model", _moe),
    ("runtime.attention_kernel", "a bf16 KV cache, or one expanded to bf16 first (dequant unfused; "
     "otherwise a quantized one is read by the fused low-bit kernel)",
     lambda c, m: not _quantized_kv(c, m) or c.kv_cache.dequant == "unfused"),
    ("moe.routing.overflow", "moe.routing.capacity_factor",
     lambda c, m: _moe(c, m) and c.moe.routing.capacity_factor is not None),
    ("moe.cache.capacity_mib", "expert SRAM in use (moe.cache.policy, moe.prefetch.enabled or pin_router)", _sram),
    ("moe.cache.persist_fraction", "expert SRAM in use (moe.cache.policy, moe.prefetch.enabled or pin_router)",
     _sram),
    ("moe.prefetch.", "moe.prefetch.enabled", _prefetch),
    ("moe.", "a MoE model", _moe),
    ("kv_cache.sinks.bits", "kv_cache.sinks.tokens", lambda c, m: c.kv_cache.sinks.tokens > 0),
    ("kv_cache.recent.bits", "kv_cache.recent.tokens", lambda c, m: c.kv_cache.recent.tokens > 0),
    ("kv_cache.outliers.bits", "kv_cache.outliers.fraction", lambda c, m: c.kv_cache.outliers.fraction > 0),
    ("kv_cache.relayout_ops_", "kv_cache.dequant software and a kernel other than fast",
     lambda c, m: _software_kv(c) and not _counted_kernel(c)),
    ("kv_cache.dequant", "a quantized KV cache (some width under 16 bits)", _quantized_kv),
    *[(f"weights.{cls}.kernel", f"weights.{cls} dequantized (software or decoder)", _weights_kernel(cls))
      for cls in ("experts", "attention", "embeddings")],
    ("weights.kernel", "a weights class dequantized (software or decoder)", _weights_kernel(None)),
    *[(f"weights.{cls}.{k}", f"weights.{cls}.format other than bf16", _weights_class(cls))
      for cls in ("experts", "attention", "embeddings") for k in ("group_size", "scale_format", "dequant")],
    *[(f"weights.{k}", "a weights format other than bf16", _weights_class(None))
      for k in ("group_size", "scale_format", "dequant")],
    ("parallel.expert_placement", "expert parallelism (parallel.ep above 1)", _expert_parallel),
    ("parallel.redundant_experts", "expert parallelism (parallel.ep above 1)", _expert_parallel),
    ("parallel.dispatch_kernel", "expert parallelism (parallel.ep above 1)", _expert_parallel),
    *[(f"parallel.{k}", "several GPUs (parallel.gpus)", _gpus)
      for k in ("tp", "ep", "dp_attention", "nodes", "micro_batches")],
    ("parallel.topology", "several GPUs (parallel.gpus), or a kernel trace's collectives re-timed "
     "(workload.kernel_trace.group_size above 1)", _gpus_or_trace_group),
]


def changed_keys(node: BaseModel, default: BaseModel | None = None, prefix: str = "") -> list[str]:
    """Dotted keys set in `node` to a value other than the schema's default: its class's, and
    (`default`) the enclosing block's own where that differs (workload.output is tokens 128, a
    Lengths 512; a block written in part keeps the class's for the rest). Leaves only; a block
    set where its default is none counts as its own key."""
    out = []
    for name, field in type(node).model_fields.items():
        if field.is_required() or name not in node.model_fields_set:
            continue
        value, own = getattr(node, name), field.get_default(call_default_factory=True)
        if isinstance(node, Variant):
            own = node.BAG[name]            # a kind's own `kind` is no default: its family's is
        base = getattr(default, name, own) if default is not None else own
        key = f"{prefix}{name}"
        if isinstance(value, BaseModel) and isinstance(base, BaseModel):   # another kind: its own defaults
            out += changed_keys(value, base if type(base) is type(value) else None, key + ".")
        elif value != base and value != own:
            out.append(key)
    return out


def rule_for(key: str) -> tuple[str, Acts] | None:
    for prefix, needs, acts in RULES:
        if key == prefix or (prefix.endswith((".", "_")) and key.startswith(prefix)):
            return needs, acts
    return None


def inert_keys(cfg: Scenario, model) -> list[str]:
    """One line for each key this scenario changes from its default that cannot act in it."""
    lines = []
    for key in changed_keys(cfg):
        rule = rule_for(key)
        if rule and not rule[1](cfg, model):
            lines.append(f"{key} has no effect in this run: it needs {rule[0]}")
    return lines
