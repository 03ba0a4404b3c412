"""What a speculative scenario's draft must be before anything is simulated (issue 47): a draft
model no larger than the model it drafts for, of its vocabulary (a drafted token is a token of the
model's), that fits in the GPU's memory beside it; and no kernel trace (a trace is one
one-token step: its verification of K+1 tokens a sequence was never traced). Each is a (key,
message) for hwsim/checks.py, which says it at the scenario's line."""

from __future__ import annotations

from hwsim.config.scenario import DraftSpeculation
from hwsim.errors import ConfigError
from hwsim.model import weight_format
from hwsim.model.shapes import ModelShape
from hwsim.parallel import memory

KEY = "workload.speculative"


def _memory(model: ModelShape, cfg, capacity: float, weights) -> memory.GpuMemory:
    """One GPU's memory for `model` at the scenario's batch and longest context, weights in `weights`."""
    w = cfg.workload
    plan = weight_format.plan(weights, model.weights)
    return memory.per_gpu(model, gpus=1, tp=1, ep=1, dp_attention=False, batch=w.batch_size,
                          context=w.context_tokens + 2 * w.decode_steps * (w.speculative.tokens + 1),
                          capacity_bytes=capacity,
                          expert_bytes_per_weight=plan.of("experts").bytes_per_weight,
                          attention_bytes_per_weight=plan.of("attention").bytes_per_weight,
                          embedding_bytes_per_weight=plan.of("embeddings").bytes_per_weight)


def problems(cfg, profile, model: ModelShape, draft: ModelShape | None):
    """(key, message) of each way the scenario's speculative draft (`draft`: its model, read
    when the scenario was loaded) cannot be run."""
    from hwsim.config.scenario import Weights

    spec = cfg.workload.speculative
    if spec is None or not spec.tokens:
        return
    if cfg.workload.kernel_trace is not None:
        yield KEY, ("a kernel trace is one traced one-token step: the verification of "
                    f"{spec.tokens + 1} tokens a sequence is not in it; unset workload.kernel_trace "
                    "or workload.speculative")
        return
    if not isinstance(spec, DraftSpeculation) or draft is None:
        return
    key = f"{KEY}.draft"
    capacity = profile.hbm.capacity_gb.value * 1e9
    target = _memory(model, cfg, capacity, cfg.weights)
    mine = _memory(draft, cfg, capacity, Weights())
    if mine.weights > target.weights:
        yield key, (f"the draft {draft.name} ({mine.weights / 1e9:.1f} GB of weights) is larger "
                    f"than the model it drafts for ({model.name}: {target.weights / 1e9:.1f} GB): each drafted "
                    f"token would cost more than the model's own step")
        return
    if draft.vocab != model.vocab:
        yield key, (f"the draft {draft.name} has a vocabulary of {draft.vocab:,} tokens, the model "
                    f"{model.name} one of {model.vocab:,}: a draft proposes the model's own tokens")
        return
    need = target.total + mine.weights + mine.kv_cache
    if need > capacity and not cfg.parallel.allow_overcommit:
        yield key, (f"the draft {draft.name} ({(mine.weights + mine.kv_cache) / 1e9:.1f} GB of weights and "
                    f"KV cache) does not fit beside {model.name} ({target.total / 1e9:.1f} GB) in "
                    f"{profile.name}'s {capacity / 1e9:.0f} GB of HBM (parallel.allow_overcommit: a what-if)")
