"""Sparse-MoE decoders with GQA attention: Mixtral, Phi-3.5-MoE, OLMoE, Qwen2-MoE, Qwen3-MoE,
Granite-MoE, gpt-oss (routed experts, shared experts, which layers are MoE)."""

from __future__ import annotations

from hwsim.model.hf_import import attention
from hwsim.model.hf_import.common import base
from hwsim.model.hf_import.reader import HfConfig
from hwsim.model.hf_import.result import Mapped

KINDS = ("mixtral", "phimoe", "olmoe", "qwen2_moe", "qwen3_moe", "granitemoe", "granitemoeshared", "gpt_oss")
# (experts field, top-k field, expert intermediate size field) of each family
FIELDS = {"mixtral": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
          "phimoe": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
          "olmoe": ("num_experts", "num_experts_per_tok", "intermediate_size"),
          "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
          "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
          "granitemoe": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
          "granitemoeshared": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
          "gpt_oss": ("num_local_experts", "num_experts_per_tok", "intermediate_size")}


def routed(cfg: HfConfig, m: Mapped, kind: str) -> None:
    experts, top_k, ffn = FIELDS[kind]
    m.put("moe.experts", cfg.count(experts), experts)
    if kind == "gpt_oss" and cfg.has("experts_per_token") and not cfg.has(top_k):
        top_k = "experts_per_token"
    cfg.get("experts_per_token")
    m.put("moe.top_k", cfg.count(top_k), top_k)
    m.put("moe.expert_ffn", cfg.count(ffn), ffn)


def leading_dense_layers(cfg: HfConfig, layers: int) -> int:
    """Qwen-MoE: layer i is MoE unless listed in mlp_only_layers or (i + 1) % decoder_sparse_step;
    hwsim models dense layers only as the leading ones."""
    step = cfg.count("decoder_sparse_step", 1)
    only = cfg.get("mlp_only_layers", [])
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise cfg.error("mlp_only_layers", "expected a list of layer indices")
    moe = [i for i in range(layers) if i not in only and (i + 1) % step == 0]
    dense = layers - len(moe)
    if moe != list(range(dense, layers)):
        key = "decoder_sparse_step" if step != 1 else "mlp_only_layers"
        raise cfg.error(key, "dense layers between MoE layers: hwsim models dense FFN layers only as "
                             "the leading ones (moe.dense_layers)")
    return dense


def build(cfg: HfConfig, m: Mapped, name: str, kind: str) -> None:
    layers, hidden, context = base(cfg, m, name, kind)
    bias = cfg.flag("attention_bias")
    qk_norm = {"olmoe": "full", "qwen3_moe": "head"}.get(kind, "")
    qkv_bias = cfg.flag("qkv_bias", True) if kind == "qwen2_moe" else bias   # Qwen2-MoE: biased q/k/v
    attention.gqa(cfg, m, hidden, qkv_bias=qkv_bias, o_bias=bias, qk_norm=qk_norm)
    attention.window(cfg, m, kind, layers, context)
    routed(cfg, m, kind)
    if kind in ("qwen2_moe", "qwen3_moe"):
        dense = leading_dense_layers(cfg, layers)
        if dense:
            m.put("moe.dense_layers", dense, "decoder_sparse_step, mlp_only_layers")
            m.put("ffn", cfg.count("intermediate_size"), "intermediate_size")
        else:
            cfg.get("intermediate_size")            # the dense MLP size, used by no layer
    if kind == "qwen2_moe" and cfg.count("shared_expert_intermediate_size", 0, low=0):
        m.put("moe.shared_experts", 1, "shared_expert_intermediate_size (Qwen2MoeSparseMoeBlock's one shared expert)")
        m.put("moe.shared_ffn", cfg.count("shared_expert_intermediate_size"), "shared_expert_intermediate_size")
        m.put("moe.shared_expert_gate", True, "Qwen2MoeSparseMoeBlock's shared_expert_gate")
    if kind == "granitemoeshared" and cfg.count("shared_intermediate_size", 0, low=0):
        m.put("moe.shared_experts", 1, "shared_intermediate_size")
        m.put("moe.shared_ffn", cfg.count("shared_intermediate_size"), "shared_intermediate_size")
    if kind == "phimoe":
        m.extras.per_layer += 2 * hidden                    # LayerNorm biases
        if cfg.flag("lm_head_bias"):
            m.extras.lm_head_bias = m.shape["vocab"]
    if kind == "gpt_oss":
        m.put("attention.sinks", True, "gpt-oss's learned attention sinks (one logit per head)")
        m.extras.per_layer += m.shape["attention"]["heads"]
        ffn, experts = m.shape["moe"]["expert_ffn"], m.shape["moe"]["experts"]
        m.extras.per_expert += 2 * ffn + hidden              # gate_up and down biases
        m.extras.per_moe_layer += experts                    # the router's bias
