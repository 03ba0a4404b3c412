"""Silent no-ops are never acceptable (issue 28): every scenario key, changed from its default
to another valid value, changes the run's result, or is listed in NO_EFFECT with the reason it
does not change what a run computes.

For each key of the schema (walked from hwsim.config.scenario.Scenario, so a new key without an
entry here fails test_every_key_is_covered), CHANGES gives the context it acts in (the keys it
depends on: a zipf exponent needs zipf routing, an arrival rate a serving run) and the change.
The run is a tiny MoE (4 layers) decoding one step, in process; its result is the summary less
the echoes of the configuration (ECHOES) and the simulator's own bookkeeping (`sim`). Keys whose
effect needs KV memory pressure over many iterations name the test that shows it
(COVERED_ELSEWHERE).

The other half: a key changed where it cannot act is reported by the run (hwsim/config/inert.py,
a warning). Every key the tiny run alone reports so is held to it: its change alters nothing
but that warning; and no key is reported in the context where it acts.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from hwsim.config.inert import inert_keys, rule_for
from hwsim.config.load import load_model, load_scenario
from hwsim.config.scenario import Scenario
from hwsim.errors import ConfigError
from hwsim.pipeline import run_config

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]
TINY = str(DATA / "tiny-moe.yaml")
TRACE_A = str(ROOT / "scenarios" / "traces" / "azure-conv-sample.csv")
TRACE_B = str(ROOT / "scenarios" / "traces" / "burstgpt-sample.csv")
MOONCAKE = str(ROOT / "scenarios" / "traces" / "mooncake-sample.jsonl")
BASE = [f"model={TINY}", "workload.decode_steps=1", "workload.batch_size=4", "workload.context_tokens=512"]

# summary fields that restate the configuration rather than result from it
ECHOES = {"scenario", "hardware", "model", "seed", "budget_ms", "batch_size", "context_tokens", "launch",
          "moe.routing", "moe.placement", "moe.cache.policy", "moe.prefetch.enabled", "moe.prefetch.predictor",
          "weights.moe_schedule", "kv.dequant", "kv.kernel", "topology"}
ECHO_PREFIXES = ("sim.", "weights.experts.", "weights.attention.", "weights.embeddings.", "weights.dequant.",
                 "weights.kernel.",
                 "parallel.gpus", "parallel.tp", "parallel.ep", "parallel.dp_attention")

# keys that do not change what a run computes, and why
NO_EFFECT = {
    "name": "names the bundle folder under reports/ (hwsim/io), nothing simulated",
    "description": "free text for the reader, copied into the bundle",
    "runtime.reuse": "simulates each distinct kernel once and replays it: identical results by design "
                     "(docs/performance.md; tests/test_run_invariants.py holds it)",
    "runtime.kernel_records": "how many steps' per-kernel records the bundle keeps for events.parquet, "
                              "the trace and the Gantt chart; every step's latency is kept regardless",
    "kv_cache.vq.entries": "sets the code width with vq.dims (bits must equal log2(entries) / dims, "
                           "validated); at a given width the codebook's size decides only whether it "
                           "fits in shared memory (refused when it does not): a lookup costs the same",
    "workload.engine.config.cache_config.backend": "one choice (hqq); the library's other, quanto, is refused",
    "workload.engine.config.cache_config.axis_key": "HQQ's dequant is the same ops over the same bytes along "
                                                    "either axis (hwsim/model/hqq_dequant.py)",
    "workload.engine.config.cache_config.axis_value": "as axis_key",
    "parallel.dp_attention": "states what tp: 1 on several GPUs runs anyway (hwsim/parallel/layout.py: "
                             "simulated layouts are tp = gpus or data-parallel attention); with it, "
                             "tp > 1 is refused",
}

# keys whose effect needs more than a tiny run (KV memory pressure over hundreds of decode
# iterations, a profiler trace): the test that shows it
COVERED_ELSEWHERE = {
    "workload.kv_allocation": "tests/test_serving_mechanisms.py",
    "workload.preemption": "tests/test_serving_swap.py::test_swap_copies_kv_out_and_back_and_recomputes_nothing",
    "workload.host_link": "tests/test_serving_swap.py::test_a_faster_host_link_swaps_sooner",
    # an imported trace needs a trace file of a real model's shapes (tests/test_ktrace.py makes them)
    "workload.kernel_trace.path": "tests/test_ktrace.py::test_a_trace_retargeted_matches_one_recorded_at_that_point",
    "workload.kernel_trace.batch_size": "tests/test_ktrace.py::test_a_trace_retargeted_matches_one_recorded_at_that_point",
    "workload.kernel_trace.context_tokens": "tests/test_ktrace.py::test_a_trace_retargeted_matches_one_recorded_at_that_point",
    "workload.kernel_trace.host": "tests/test_ktrace.py::test_a_faster_host_profile_shortens_a_host_bound_step",
    "workload.kernel_trace.group_size": "tests/test_ktrace_collectives.py::test_a_traced_all_reduce_takes_what_hwsims_two_gpu_model_gives",
    # a real engine needs its package (the hf-engine extra) and a real model's shapes
    "workload.engine.kind": "tests/test_engine_hf.py::test_fifty_requests_end_to_end",
    "workload.engine.config": "tests/test_engine_hf.py::test_budget_splits_a_long_prompt",
    "workload.engine.host": "tests/test_engine_contract.py::test_engine_host_and_host_trace_choose_the_hosts_numbers",
    "workload.engine.host_trace": "tests/test_engine_contract.py::test_engine_host_and_host_trace_choose_the_hosts_numbers",
    # fixed-batch decode's engine (hf-generate) needs a real model's shapes and its host profile
    **{f"workload.engine.{k}": "tests/test_hf_generate.py::test_each_generate_field_changes_the_step"
       for k in ("attention_plans", "config.cache_config.nbits", "config.cache_config.q_group_size",
                 "config.cache_config.residual_length")},
    "workload.engine.config.cache_implementation": "tests/test_hf_generate.py::test_cache_implementation_changes_the_step",
}

# each kind of a block takes only its own keys (hwsim.config.variants): contexts do not stack kinds
POISSON = ["workload.arrivals.kind=poisson", "workload.arrivals.rate_per_s=5000", "workload.arrivals.requests=4"]
SERVING_FIXED_PROMPT = [*POISSON, "workload.output.tokens=3"]
SERVING = [*SERVING_FIXED_PROMPT, "workload.prompt.tokens=1024"]
SERVING_FIXED_OUTPUT = [*POISSON, "workload.prompt.tokens=1024"]
TRACE = ["workload.arrivals.kind=trace", f"workload.arrivals.trace={TRACE_A}", "workload.arrivals.requests=4",
         "workload.prompt.tokens=1024", "workload.output.tokens=3"]
CLOSED = ["workload.arrivals.kind=closed", "workload.arrivals.requests=4", "workload.prompt.tokens=1024",
          "workload.output.tokens=3", "workload.arrivals.users=2", "workload.arrivals.think_ms=5"]
DISAGG = [*SERVING, "workload.disaggregation.prefill_gpus=1"]
KV4 = ["kv_cache.bits=4"]
VQ = ["kv_cache.element=vq", "kv_cache.bits=2"]
ZIPF = ["moe.routing.kind=zipf", "workload.batch_size=8"]
TWO_STEPS = ["workload.decode_steps=2"]
MTP = ["workload.speculative.method=mtp", "workload.speculative.tokens=1"]
DRAFT = ["workload.speculative.method=draft", "workload.speculative.tokens=1", f"workload.speculative.draft={TINY}"]
PREFETCH = ["moe.prefetch.enabled=true", "moe.prefetch.predictor=previous-token", *TWO_STEPS]
INT4 = ["weights.format=int4"]
TP2 = ["parallel.gpus=2", "parallel.tp=2"]
EP2 = ["parallel.gpus=2", "parallel.ep=2", "parallel.dp_attention=true"]

# key -> (context, change): the change applied on top of BASE + context. A change may set a
# companion key the validation requires with it (noted).
CHANGES: dict[str, tuple[list[str], list[str]]] = {
    "hardware": ([], ["hardware=b200"]),
    "hardware_overrides": ([], ["hardware_overrides.hbm.peak_bandwidth_gbps=2000"]),
    "model": ([], ["model=olmoe-1b-7b"]),
    "seed": ([], ["seed=3"]),
    "budget_ms": ([], ["budget_ms=0.001"]),
    "workload.batch_size": ([], ["workload.batch_size=8"]),
    "workload.context_tokens": ([], ["workload.context_tokens=4096"]),
    "workload.decode_steps": ([], ["workload.decode_steps=2"]),
    "workload.prompt_tokens": ([], ["workload.prompt_tokens=64"]),
    "workload.arrivals.kind": (SERVING[3:], ["workload.arrivals.kind=poisson", "workload.arrivals.requests=4"]),
    "workload.arrivals.rate_per_s": (SERVING, ["workload.arrivals.rate_per_s=50"]),
    "workload.arrivals.cv": (["workload.arrivals.kind=gamma", *SERVING[1:]], ["workload.arrivals.cv=8"]),
    "workload.arrivals.users": (CLOSED, ["workload.arrivals.users=1"]),
    "workload.arrivals.think_ms": (CLOSED, ["workload.arrivals.think_ms=200"]),
    "workload.arrivals.trace": (TRACE, [f"workload.arrivals.trace={TRACE_B}"]),
    "workload.arrivals.requests": (SERVING, ["workload.arrivals.requests=3"]),
    "workload.arrivals.rate_scale": (TRACE, ["workload.arrivals.rate_scale=100"]),
    "workload.arrivals.start": (TRACE, ["workload.arrivals.start=5"]),
    "workload.arrivals.duration": (TRACE, ["workload.arrivals.duration=5"]),
    "workload.prompt.kind": (SERVING_FIXED_PROMPT, ["workload.prompt.kind=uniform", "workload.prompt.high=4096"]),
    "workload.prompt.tokens": (SERVING, ["workload.prompt.tokens=4096"]),
    "workload.prompt.low": ([*SERVING_FIXED_PROMPT, "workload.prompt.kind=uniform", "workload.prompt.high=4096"],
                            ["workload.prompt.low=4000"]),
    "workload.prompt.high": ([*SERVING_FIXED_PROMPT, "workload.prompt.kind=uniform", "workload.prompt.high=4096"],
                             ["workload.prompt.high=8"]),
    "workload.prompt.sigma": ([*SERVING, "workload.prompt.kind=lognormal"], ["workload.prompt.sigma=2"]),
    "workload.prompt.max_tokens": (SERVING, ["workload.prompt.max_tokens=64"]),
    "workload.output.kind": (SERVING_FIXED_OUTPUT, ["workload.output.kind=uniform", "workload.output.high=8"]),
    "workload.output.tokens": (SERVING, ["workload.output.tokens=6"]),
    "workload.output.low": ([*SERVING_FIXED_OUTPUT, "workload.output.kind=uniform", "workload.output.high=8"],
                            ["workload.output.low=7"]),
    "workload.output.high": ([*SERVING_FIXED_OUTPUT, "workload.output.kind=uniform", "workload.output.high=8"],
                             ["workload.output.high=2"]),
    "workload.output.sigma": ([*SERVING, "workload.output.kind=lognormal"], ["workload.output.sigma=2"]),
    "workload.output.max_tokens": (SERVING, ["workload.output.max_tokens=1"]),
    "workload.max_batch_size": (SERVING, ["workload.max_batch_size=1"]),
    "workload.token_budget": (SERVING, ["workload.token_budget=16"]),
    "workload.chunked_prefill": ([*SERVING, "workload.token_budget=16"], ["workload.chunked_prefill=false"]),
    "workload.prefix_caching": ([*TRACE, f"workload.arrivals.trace={MOONCAKE}"], ["workload.prefix_caching=false"]),
    "workload.ttft_target_ms": (SERVING, ["workload.ttft_target_ms=0.001"]),
    "workload.itl_target_ms": (SERVING, ["workload.itl_target_ms=0.001"]),
    "workload.disaggregation.prefill_gpus": (DISAGG, ["workload.disaggregation.prefill_gpus=2"]),
    "workload.disaggregation.decode_gpus": (DISAGG, ["workload.disaggregation.decode_gpus=2"]),
    "workload.disaggregation.link": (DISAGG, ["workload.disaggregation.link=network"]),
    "workload.disaggregation.topology": (DISAGG, ["workload.disaggregation.topology=gb200-nvl72",
                                                  "hardware=b200"]),      # a topology of its chip
    "workload.speculative.method": (MTP, ["workload.speculative.method=draft", f"workload.speculative.draft={TINY}"]),
    "workload.speculative.tokens": (MTP, ["workload.speculative.tokens=2"]),
    "workload.speculative.acceptance": (MTP, ["workload.speculative.acceptance=0.3"]),
    "workload.speculative.draft": (DRAFT, [f"workload.speculative.draft={DATA / 'tiny-draft.yaml'}"]),
    "runtime.launch": ([], ["runtime.launch=eager"]),
    "runtime.fidelity": ([], ["runtime.fidelity=tile"]),
    "runtime.attention_kernel": ([], ["runtime.attention_kernel=cudnn"]),
    "runtime.sm_clock": ([], ["runtime.sm_clock=1000"]),
    "runtime.moe_schedule": ([], ["runtime.moe_schedule=grouped"]),
    "kv_cache.preset": ([], ["kv_cache.preset=kivi-2"]),
    "kv_cache.bits": ([], ["kv_cache.bits=4"]),
    "kv_cache.key_bits": ([], ["kv_cache.key_bits=4"]),
    "kv_cache.value_bits": ([], ["kv_cache.value_bits=4"]),
    "kv_cache.element": (["kv_cache.bits=8"], ["kv_cache.element=fp8"]),
    "kv_cache.group_size": (KV4, ["kv_cache.group_size=32"]),
    "kv_cache.scale_format": (KV4, ["kv_cache.scale_format=fp8"]),
    "kv_cache.zero_point": (KV4, ["kv_cache.zero_point=false"]),
    "kv_cache.sinks.tokens": ([*KV4, "kv_cache.sinks.bits=16"], ["kv_cache.sinks.tokens=64"]),
    "kv_cache.sinks.bits": ([*KV4, "kv_cache.sinks.tokens=64"], ["kv_cache.sinks.bits=8"]),
    "kv_cache.outliers.fraction": ([*KV4, "kv_cache.outliers.bits=16"], ["kv_cache.outliers.fraction=0.1"]),
    "kv_cache.outliers.bits": ([*KV4, "kv_cache.outliers.fraction=0.1"], ["kv_cache.outliers.bits=8"]),
    "kv_cache.recent.tokens": ([*KV4, "kv_cache.recent.bits=16"], ["kv_cache.recent.tokens=128"]),
    "kv_cache.recent.bits": ([*KV4, "kv_cache.recent.tokens=128"], ["kv_cache.recent.bits=8"]),
    # the code width is log2(entries) / dims: a change of one needs the other to keep bits
    "kv_cache.vq.dims": (VQ, ["kv_cache.vq.dims=1", "kv_cache.vq.entries=4"]),   # entries: the same 2 bits
    "kv_cache.dequant": (KV4, ["kv_cache.dequant=unfused"]),
    # the relayout keys cost the naive family; unset, the kernel is the fast one (issue 44)
    "kv_cache.relayout_ops_subbyte": ([*KV4, "kv_cache.kernel=naive"], ["kv_cache.relayout_ops_subbyte=1"]),
    "kv_cache.relayout_ops_byte": (["kv_cache.bits=8", "kv_cache.kernel=naive"], ["kv_cache.relayout_ops_byte=1"]),
    "kv_cache.kernel": (KV4, ["kv_cache.kernel=naive"]),         # issue 44: unset is the measured fast family
    "kv_cache.expansion": ([*KV4, "kv_cache.dequant=unfused"], ["kv_cache.expansion=hqq"]),
    "moe.routing.kind": (["workload.batch_size=8"], ["moe.routing.kind=zipf"]),
    "moe.routing.zipf_exponent": (ZIPF, ["moe.routing.zipf_exponent=3"]),
    "moe.routing.hot_persist_steps": ([*ZIPF, "workload.decode_steps=3"], ["moe.routing.hot_persist_steps=1"]),
    "moe.routing.drift": ([*ZIPF, "workload.decode_steps=3", "moe.routing.hot_persist_steps=1"],
                          ["moe.routing.drift=1"]),
    "moe.routing.balance": (ZIPF, ["moe.routing.balance=1"]),
    "moe.routing.trace": ([], []),         # filled in by a fixture (needs files)
    "moe.routing.capacity_factor": (["workload.batch_size=8"], ["moe.routing.capacity_factor=0.5"]),
    "moe.routing.overflow": (["workload.batch_size=8", "moe.routing.capacity_factor=0.5"],
                             ["moe.routing.overflow=reroute"]),
    "moe.placement": ([], ["moe.placement=per-expert"]),
    "moe.cache.policy": (TWO_STEPS, ["moe.cache.policy=lru"]),
    "moe.cache.capacity_mib": ([*TWO_STEPS, "moe.cache.policy=lru"], ["moe.cache.capacity_mib=200"]),
    "moe.cache.persist_fraction": ([*TWO_STEPS, "moe.cache.policy=lru"], ["moe.cache.persist_fraction=0.25"]),
    "moe.cache.pin_router": ([], ["moe.cache.pin_router=true"]),
    "moe.prefetch.enabled": ([], ["moe.prefetch.enabled=true"]),
    "moe.prefetch.predictor": (PREFETCH, ["moe.prefetch.predictor=previous-layer"]),
    "moe.prefetch.accuracy": ([*PREFETCH, "moe.prefetch.predictor=oracle"], ["moe.prefetch.accuracy=0.5"]),
    "moe.prefetch.lookahead_layers": (PREFETCH, ["moe.prefetch.lookahead_layers=1"]),
    "weights.format": ([], ["weights.format=fp8"]),
    "weights.group_size": (INT4, ["weights.group_size=32"]),
    "weights.scale_format": (INT4, ["weights.scale_format=fp32"]),
    "weights.dequant": (["hardware=h200-decoder", *INT4], ["weights.dequant=decoder"]),
    "weights.kernel": (INT4, ["weights.kernel=fast"]),
    "weights.experts.kernel": (["weights.experts.format=int4"], ["weights.experts.kernel=fast"]),
    "weights.attention.kernel": (["weights.attention.format=int4"], ["weights.attention.kernel=fast"]),
    "weights.embeddings.kernel": (["weights.embeddings.format=int4"], ["weights.embeddings.kernel=fast"]),
    "weights.experts.format": ([], ["weights.experts.format=fp8"]),
    "weights.experts.group_size": (["weights.experts.format=int4"], ["weights.experts.group_size=32"]),
    "weights.experts.scale_format": (["weights.experts.format=int4"], ["weights.experts.scale_format=fp32"]),
    "weights.experts.dequant": (["hardware=h200-decoder", "weights.experts.format=int4"],
                                ["weights.experts.dequant=decoder"]),
    "weights.attention.format": ([], ["weights.attention.format=fp8"]),
    "weights.attention.group_size": (["weights.attention.format=int4"], ["weights.attention.group_size=32"]),
    "weights.attention.scale_format": (["weights.attention.format=int4"],
                                       ["weights.attention.scale_format=fp32"]),
    "weights.attention.dequant": (["hardware=h200-decoder", "weights.attention.format=int4"],
                                  ["weights.attention.dequant=decoder"]),
    "weights.embeddings.format": ([], ["weights.embeddings.format=fp8"]),
    "weights.embeddings.group_size": (["weights.embeddings.format=int4"], ["weights.embeddings.group_size=32"]),
    "weights.embeddings.scale_format": (["weights.embeddings.format=int4"],
                                        ["weights.embeddings.scale_format=fp32"]),
    "weights.embeddings.dequant": (["hardware=h200-decoder", "weights.embeddings.format=int4"],
                                   ["weights.embeddings.dequant=decoder"]),
    "parallel.gpus": ([], ["parallel.gpus=2", "parallel.tp=2"]),      # tp must divide gpus: tp 2 alone is refused
    "parallel.tp": (["parallel.gpus=2"], ["parallel.tp=2"]),
    "parallel.ep": (TP2, ["parallel.ep=2"]),
    "parallel.nodes": (TP2, ["parallel.nodes=2"]),
    "parallel.topology": (TP2, ["parallel.topology=h800-cx7", "hardware=h100-sxm"]),   # a topology of its chip
    "parallel.allow_overcommit": (["hardware_overrides.hbm.capacity_gb=0.1"], ["parallel.allow_overcommit=true"]),
    "parallel.expert_placement": ([*EP2, "moe.routing.kind=zipf", "workload.batch_size=8"],
                                  ["parallel.expert_placement=round-robin"]),
    "parallel.redundant_experts": ([*EP2, "moe.routing.kind=zipf", "workload.batch_size=8",
                                    "parallel.expert_placement=redundant"], ["parallel.redundant_experts=2"]),
    "parallel.dispatch_kernel": (EP2, ["parallel.dispatch_kernel=nccl-all-to-all"]),
    "parallel.micro_batches": (EP2, ["parallel.micro_batches=2"]),
}


def _blocks(ann) -> list[type[BaseModel]]:
    """The schema blocks an annotation holds (through Optional, unions and Annotated)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    args = typing.get_args(ann)[:1] if typing.get_origin(ann) is typing.Annotated else typing.get_args(ann)
    return [b for a in args for b in _blocks(a)]


def schema_keys(model: type[BaseModel] = Scenario, prefix: str = "") -> list[str]:
    """Every leaf key of the scenario schema, dotted."""
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        subs = _blocks(ann)                # a union: every kind's keys
        if subs:
            keys += dict.fromkeys(k for sub in subs for k in schema_keys(sub, f"{prefix}{name}."))
        else:
            keys.append(f"{prefix}{name}")
    return keys


def result(sets: list[str]) -> dict:
    """The run's summary, flattened, less the configuration's echoes and the simulator's
    bookkeeping; a refused scenario's result is its error."""
    try:
        summary = run_config(load_scenario(None, [*BASE, *sets]), intervals=False).summary
    except ConfigError as exc:
        return {"error": exc.message}
    flat: dict = {}

    def walk(prefix, node):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}{k}.", v)
        else:
            key = prefix[:-1]
            if key not in ECHOES and not key.startswith(ECHO_PREFIXES):
                flat[key] = json.dumps(node, sort_keys=True, default=str)
    walk("", summary)
    return flat


_results: dict[tuple, dict] = {}


def cached_result(sets: list[str]) -> dict:
    key = tuple(sets)
    if key not in _results:
        _results[key] = result(sets)
    return _results[key]


@pytest.fixture(scope="module")
def routing_traces(tmp_path_factory):
    """Two router logs of the tiny model that pick different experts."""
    folder = tmp_path_factory.mktemp("routing")
    paths = []
    for name, experts in (("same", lambda t: "3 5"), ("spread", lambda t: f"{2 * t} {2 * t + 1}")):
        path = folder / f"router-{name}.csv"
        rows = ["step,layer,token,experts"] + [f"0,{layer},{t},{experts(t)}" for layer in range(4) for t in range(4)]
        path.write_text("\n".join(rows) + "\n")
        paths.append(str(path))
    return paths


def test_every_key_is_covered():
    keys = set(schema_keys())
    entries = [set(NO_EFFECT), set(CHANGES), set(COVERED_ELSEWHERE)]
    assert sum(map(len, entries)) == len(set().union(*entries))          # one entry a key
    assert keys == set().union(*entries), (
        f"keys without an entry: {sorted(keys - set().union(*entries))}; "
        f"entries for no key: {sorted(set().union(*entries) - keys)}")


@pytest.mark.parametrize("key", sorted(COVERED_ELSEWHERE))
def test_keys_covered_elsewhere_name_a_test_that_exists(key):
    path, _, name = COVERED_ELSEWHERE[key].partition("::")
    text = (ROOT / path).read_text()
    assert key.split(".")[-1] in text and (not name or f"def {name}(" in text)


def test_the_tiny_run_repeats_exactly():
    assert result([]) == result([])


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_changing_a_key_changes_the_run(key, routing_traces):
    context, change = CHANGES[key]
    if key == "moe.routing.trace":
        context = ["moe.routing.kind=trace", f"moe.routing.trace={routing_traces[0]}"]
        change = [f"moe.routing.trace={routing_traces[1]}"]
    assert any(c.split("=")[0].startswith(key) for c in change)
    before, after = cached_result(context), cached_result([*context, *change])
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed, f"{key}: {change} on top of {context} changes nothing in the summary"
    assert "error" not in after, after["error"]
    assert not warned(after, key), f"{key} acts here, yet the run says it has no effect"


def warned(flat: dict, key: str) -> bool:
    return any(w.startswith(f"{key} has no effect") for w in json.loads(flat.get("warnings", "[]")))


def inert_in_base() -> list[str]:
    """The keys whose change, made on the tiny run alone (without the context it acts in),
    the run reports as having no effect."""
    keys = []
    for key, (_, change) in CHANGES.items():
        if rule_for(key) is None or key == "moe.routing.trace":
            continue
        try:
            cfg = load_scenario(None, [*BASE, *change])
        except ConfigError:
            continue
        said = inert_keys(cfg, load_model(cfg.model))
        if all(any(w.startswith(f"{c.split('=')[0]} has no effect") for w in said) for c in change):
            keys.append(key)      # (a change that sets a companion key too only if it is inert as well)
    return keys


INERT_IN_BASE = inert_in_base()


def test_many_keys_are_reported_where_they_cannot_act():
    # (a key of one kind of a block, or of serving, or of a quantized KV cache, is refused at load
    # instead: below)
    assert len(INERT_IN_BASE) >= 25, INERT_IN_BASE


@pytest.mark.parametrize("key", INERT_IN_BASE)
def test_a_key_reported_as_having_no_effect_changes_nothing_else(key):
    """hwsim.config.inert's warning is true: the change alone leaves the result as it was."""
    _, change = CHANGES[key]
    before, after = cached_result([]), cached_result(change)
    assert warned(after, key)
    changed = sorted(k for k in before.keys() | after.keys() if k != "warnings" and before.get(k) != after.get(k))
    assert not changed, f"{key} is reported as having no effect, but {change} changes {changed}"


# a key of one kind of a block, changed under the block's default kind (fixed-batch decode, fixed
# lengths, uniform routing), and the kind the error names
FIXED_BATCH = "fixed-batch decode (workload.arrivals kind none)"
OTHER_KIND = {"workload.arrivals.rate_per_s": "kind none", "workload.arrivals.users": "kind none",
              "workload.arrivals.trace": "kind none", "workload.arrivals.requests": "kind none",
              "workload.max_batch_size": FIXED_BATCH, "workload.preemption": FIXED_BATCH,
              "moe.routing.zipf_exponent": "kind uniform", "moe.routing.trace": "kind uniform"}
SERVING_KIND = {"workload.prompt.low": "kind fixed", "workload.output.sigma": "kind fixed"}


@pytest.mark.parametrize("key", sorted(OTHER_KIND))
def test_a_key_of_another_kind_is_refused_at_load(key):
    """Set under a kind it does nothing for, a kind's own key is an unknown key: one error
    naming it (--set here), rather than a warning of a run that ignores it."""
    with pytest.raises(ConfigError) as exc:
        load_scenario(None, [*BASE, f"{key}=7"])
    assert exc.value.key == key and exc.value.file == "--set"
    assert exc.value.message == f"unknown key of {OTHER_KIND[key]}"


# a key of one storage kind of the KV cache (issue 42), set under another: (context, key set, the
# key the error names, the kind it names); the bf16 default holds no codes, fp8 codes no scales
BF16_KV = "a bf16 cache (every kv_cache width 16 bits)"
KV_KIND = [([], "kv_cache.group_size=64", "kv_cache.group_size", BF16_KV),
           ([], "kv_cache.scale_format=fp8", "kv_cache.scale_format", BF16_KV),
           ([], "kv_cache.zero_point=false", "kv_cache.zero_point", BF16_KV),
           ([], "kv_cache.kernel=naive", "kv_cache.kernel", BF16_KV),
           ([], "kv_cache.relayout_ops_byte=1", "kv_cache.relayout_ops_byte", BF16_KV),
           (KV4, "kv_cache.vq.dims=2", "kv_cache.vq", "element int"),
           (["kv_cache.preset=fp8"], "kv_cache.group_size=64", "kv_cache.group_size", "element fp8"),
           (["kv_cache.preset=fp8"], "kv_cache.relayout_ops_byte=1", "kv_cache.relayout_ops_byte", "element fp8"),
           (["moe.prefetch.predictor=previous-token"], "moe.prefetch.accuracy=0.5", "moe.prefetch.accuracy",
            "predictor previous-token")]


@pytest.mark.parametrize("context, change, key, kind", KV_KIND, ids=[f"{c[-1:]}{s}" for c, s, _, _ in KV_KIND])
def test_a_key_of_another_storage_kind_is_refused_at_load(context, change, key, kind):
    with pytest.raises(ConfigError) as exc:
        load_scenario(None, [*BASE, *context, change])
    assert (exc.value.key, exc.value.message) == (key, f"unknown key of {kind}")


@pytest.mark.parametrize("key", sorted(SERVING_KIND))
def test_a_length_key_of_another_kind_is_refused_at_load(key):
    with pytest.raises(ConfigError) as exc:
        load_scenario(None, [*BASE, *POISSON, f"{key}=7"])
    assert (exc.value.key, exc.value.message) == (key, f"unknown key of {SERVING_KIND[key]}")

