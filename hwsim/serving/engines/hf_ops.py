"""How many ATen ops transformers 5.17's continuous batching dispatches per decoder layer of a
model's decode step: counted by running the engine's own forward, on the CPU, on a copy of the
model's layer structure at tiny widths.

An eager engine step is host-bound: each op costs its Python, ATen dispatch and launch call
(hardware_profiles/engine_hosts/: `launch_us` per kernel, `kernels_per_layer` measured on one
model). A layer of another structure dispatches a different number of ops: Qwen3-MoE's grouped_mm
experts path (router softmax/top-k, sort, gathers, histc, cumsum, masks, two grouped GEMMs, the
weighted sum) and its Q/K RMSNorms dispatch 75 ops a layer where Llama's dispatches 42. The host
profile's kernels per layer are scaled by this count over its reference model's
(`ops_per_layer_reference`), so the structure comes from the library's own code, not a table.

The count runs the real `ContinuousBatchingManager` loop (paged cache update and gathers, mask,
sampling) with a dispatch mode that counts every op that is not a view or an allocation, on 4
requests, a 1-layer and a 2-layer copy: per layer = the difference of their decode steps. Widths
do not change which ops run (head_dim 8, 8-wide FFNs, a 512-token vocabulary); the layer structure
(attention kind, Q/K norm, experts and their shared expert) does.
"""

from __future__ import annotations

import functools
import logging
import statistics
from types import SimpleNamespace
from unittest import mock

HEAD_DIM = 8
SKIPPED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh",
           "resize_", "set_", "detach", "alias", "_unsafe_view"}


def architecture(model) -> dict:
    """A transformers config dict of `model`'s layer structure (hwsim ModelShape) at tiny widths:
    the HF module family the engine would run for that structure."""
    a, m = model.attention, model.moe
    heads = a.heads
    kw = {"vocab_size": 512, "num_attention_heads": heads, "hidden_size": HEAD_DIM * heads, "head_dim": HEAD_DIM,
          "num_key_value_heads": getattr(a, "kv_heads", heads), "intermediate_size": 8,
          "max_position_embeddings": 4096, "tie_word_embeddings": False, "rope_scaling": None}
    if a.latent:
        return {**kw, "model_type": "deepseek_v3", "q_lora_rank": a.q_lora_rank and 8, "kv_lora_rank": 8,
                "qk_nope_head_dim": HEAD_DIM // 2, "qk_rope_head_dim": HEAD_DIM // 2, "v_head_dim": HEAD_DIM,
                "num_key_value_heads": heads, "n_routed_experts": m.experts if m else 1,
                "n_shared_experts": (m.shared_experts if m else 0) or None, "num_experts_per_tok": m.top_k if m else 1,
                "moe_intermediate_size": 8, "first_k_dense_replace": 0 if m else 1, "n_group": m.groups if m else 1,
                "topk_group": m.topk_groups if m else 1}
    if m is None:
        return {**kw, "model_type": "qwen3" if getattr(a, "qk_norm", False) else "llama"}
    moe = {"num_experts": m.experts, "num_experts_per_tok": m.top_k, "moe_intermediate_size": 8,
           "norm_topk_prob": True}          # every layer sparse: the families' defaults
    if m.shared_experts:
        return {**kw, **moe, "model_type": "qwen2_moe", "shared_expert_intermediate_size": 8}
    if getattr(a, "qk_norm", False):
        return {**kw, **moe, "model_type": "qwen3_moe"}
    return {**kw, "model_type": "mixtral", "num_local_experts": m.experts, "num_experts_per_tok": m.top_k}


def _counter():
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpCounter(TorchDispatchMode):
        """Counts the ops that would launch work on the device: not views, not allocations."""

        def __init__(self):
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view and func._schema.name.split("::")[-1] not in SKIPPED:
                self.ops += 1
            return func(*args, **(kwargs or {}))

    return OpCounter()


def _decode_steps(arch: dict, layers: int) -> list[int]:
    """Ops of each engine step of 4 short requests through a `layers`-layer copy (the first: prefill)."""
    import torch
    import transformers
    from transformers import ContinuousBatchingConfig, GenerationConfig

    kw = dict(arch, num_hidden_layers=layers)
    cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    counter, marks, forward = _counter(), [], model.forward

    def marked(*args, **kwargs):
        marks.append(counter.ops)
        return forward(*args, **kwargs)

    model.forward = marked
    gen = GenerationConfig(do_sample=False, max_new_tokens=4, eos_token_id=-1)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=(
        ContinuousBatchingConfig(num_blocks=16, max_batch_tokens=256)))
    for i in range(4):
        manager.add_request(list(range(10, 30 + i)), request_id=f"r{i}", max_new_tokens=4, eos_token_id=-1)
    status = manager.background_thread_status
    status.request_stop(status.FLUSH_AND_STOP, 0)
    quiet = logging.getLogger("ContinuousBatchingLogger")
    level, quiet.level = quiet.level, logging.CRITICAL      # a structure the engine cannot run: said below
    try:
        with counter:
            manager._run_generation_loop()
    finally:
        quiet.level = level
    if status.fatal_error is not None:
        raise CountError(f"transformers' continuous batching cannot run a {arch['model_type']} layer: "
                         f"{status.fatal_error!r}")
    marks.append(counter.ops)
    return [b - a for a, b in zip(marks, marks[1:])]


class CountError(Exception):
    """The engine could not run the model's layer structure."""


def ops_per_layer(model) -> float:
    """ATen ops the engine dispatches per decoder layer in a decode step of `model` (median over
    the decode steps of a 2-layer less a 1-layer copy). CountError where the engine cannot run it."""
    return _count(tuple(sorted(architecture(model).items())))


# Process-wide by decision: a pure function of the layer's structure and the pinned library (no
# run owns it), 3-10 s a count, asked again by every HF run of a sweep or a prediction grid.
@functools.lru_cache(maxsize=16)
def _count(arch: tuple) -> float:
    from transformers.generation.continuous_batching import continuous_api
    # the engine's batch processor collects the whole heap when it is freed (its __del__: 0.3 s
    # with torch loaded, on each copy's return); the copies' cycles are left to the next collection
    with mock.patch.object(continuous_api, "gc", SimpleNamespace(collect=lambda *args: 0)):
        one, two = _decode_steps(dict(arch), 1), _decode_steps(dict(arch), 2)
    return float(statistics.median(b - a for a, b in list(zip(one, two))[1:]))
