"""DeepSeek-V2/V3 and their descendants (Kimi-K2 ships as deepseek_v3), GLM-4.5 MoE: routed and
shared experts, leading dense layers (first_k_dense_replace), group-limited routing, MTP."""

from __future__ import annotations

from hwsim.model.hf_import import attention
from hwsim.model.hf_import.common import base
from hwsim.model.hf_import.reader import HfConfig
from hwsim.model.hf_import.result import Mapped

KINDS = ("deepseek_v2", "deepseek_v3", "glm4_moe")
TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


def _routing(cfg: HfConfig, m: Mapped, kind: str) -> None:
    method = "noaux_tc" if kind == "glm4_moe" else cfg.choice("topk_method", TOPK_METHODS, "greedy")
    if method != "greedy":
        m.put("moe.groups", cfg.count("n_group", 1), "n_group")
        m.put("moe.topk_groups", cfg.count("topk_group", 1), "topk_group")
    else:
        cfg.get("n_group"), cfg.get("topk_group")     # greedy routing ignores the groups
    scoring = "sigmoid" if kind == "glm4_moe" else cfg.choice("scoring_func", ("softmax", "sigmoid"), "softmax")
    m.put("moe.scoring", scoring, "scoring_func" if kind != "glm4_moe" else "Glm4MoeTopkRouter (sigmoid)")
    if method == "noaux_tc":
        m.extras.per_moe_layer += m.shape["moe"]["experts"]      # e_score_correction_bias


def build(cfg: HfConfig, m: Mapped, name: str, kind: str) -> None:
    layers, hidden, context = base(cfg, m, name, kind)
    if kind == "glm4_moe":
        bias = cfg.flag("attention_bias")
        attention.gqa(cfg, m, hidden, qkv_bias=bias, qk_norm="head" if cfg.flag("use_qk_norm") else "")
    else:
        attention.mla(cfg, m)
    attention.window(cfg, m, kind, layers, context)
    m.put("moe.experts", cfg.count("n_routed_experts"), "n_routed_experts")
    m.put("moe.top_k", cfg.count("num_experts_per_tok"), "num_experts_per_tok")
    m.put("moe.expert_ffn", cfg.count("moe_intermediate_size"), "moe_intermediate_size")
    shared = cfg.count("n_shared_experts", 0, low=0)
    if shared:
        m.put("moe.shared_experts", shared, "n_shared_experts")
        m.put("moe.shared_ffn", m.shape["moe"]["expert_ffn"], "moe_intermediate_size (each shared expert)")
    if cfg.count("moe_layer_freq", 1) != 1:
        raise cfg.error("moe_layer_freq", "MoE only every few layers: hwsim models dense FFN layers only "
                                          "as the leading ones (first_k_dense_replace)")
    dense = cfg.count("first_k_dense_replace", 0, low=0)
    if dense:
        m.put("moe.dense_layers", dense, "first_k_dense_replace")
        m.put("ffn", cfg.count("intermediate_size"), "intermediate_size (the dense layers)")
    else:
        cfg.get("intermediate_size")
    _routing(cfg, m, kind)
    m.extras.mtp_layers = cfg.count("num_nextn_predict_layers", 0, low=0)
