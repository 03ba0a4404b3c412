"""The checkpoint's linear modules of each tensor class, named as the family's Hugging Face
code names them, so a quantization config's target and ignore patterns can be matched."""

from __future__ import annotations

import fnmatch
import re

GATED = ("gate_proj", "up_proj", "down_proj")
EXPERT_LEAVES = {"mixtral": ("block_sparse_moe.experts.0", ("w1", "w2", "w3")),
                 "phimoe": ("block_sparse_moe.experts.0", ("w1", "w2", "w3")),
                 "granitemoe": ("block_sparse_moe", ("input_linear", "output_linear")),
                 "granitemoeshared": ("block_sparse_moe", ("input_linear", "output_linear")),
                 "gpt_oss": ("mlp.experts", ("gate_up_proj", "down_proj"))}
SHARED = {"qwen2_moe": "mlp.shared_expert", "deepseek_v2": "mlp.shared_experts",
          "deepseek_v3": "mlp.shared_experts", "glm4_moe": "mlp.shared_experts"}


def _attention(shape: dict) -> tuple[str, ...]:
    a = shape["attention"]
    if a["kind"] == "mla":
        q = ("q_a_proj", "q_b_proj") if a.get("q_lora_rank") else ("q_proj",)
        return (*q, "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
    return ("q_proj", "k_proj", "v_proj", "o_proj")


def by_class(shape: dict, kind: str) -> dict[str, list[str]]:
    """Module names of each tensor class: attention, experts, dense (dense FFN and shared
    experts) and lm_head; one routed expert stands for all of them."""
    moe = shape.get("moe")
    first_moe = moe.get("dense_layers", 0) if moe else shape["layers"]
    out: dict[str, list[str]] = {"attention": [], "experts": [], "dense": [], "lm_head": ["lm_head"]}
    for i in range(shape["layers"]):
        p = f"model.layers.{i}."
        out["attention"] += [f"{p}self_attn.{leaf}" for leaf in _attention(shape)]
        if i < first_moe:
            out["dense"] += [f"{p}mlp.{leaf}" for leaf in GATED]
            continue
        node, leaves = EXPERT_LEAVES.get(kind, ("mlp.experts.0", GATED))
        out["experts"] += [f"{p}{node}.{leaf}" for leaf in leaves]
        if moe.get("shared_experts"):
            if kind == "granitemoeshared":
                out["dense"] += [f"{p}shared_mlp.input_linear", f"{p}shared_mlp.output_linear"]
            else:
                out["dense"] += [f"{p}{SHARED[kind]}.{leaf}" for leaf in GATED]
    return out


def matches(pattern: str, name: str) -> bool:
    """A module pattern as the quantizers write them: 're:' a regular expression (compressed-
    tensors), a glob (ModelOpt's exclude_modules), 'Linear' (every linear module), or a module
    name or a dotted part of one ending at a module boundary, as transformers matches
    modules_to_not_convert ('mlp.gate' is the router, not mlp.gate_proj)."""
    if pattern == "Linear":
        return True
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
    return f"{pattern}." in f"{name}."
