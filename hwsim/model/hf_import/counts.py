"""Parameter counts and KV bytes per token of an imported model, the figures `hwsim model import
--json` reports: embeddings and LM head included (a tied pair once), routed top-k plus shared
experts per token, MTP layers apart; the bf16 KV cache of the layers that keep every token."""

from __future__ import annotations

from hwsim.model.hf_import.result import Extras
from hwsim.model.shapes import ModelShape

KV_BYTES = 2                   # the contract's figure is a bf16 cache


def _layer(shape: ModelShape, x: Extras, experts: int | None) -> int:
    """Parameters of one layer: a dense one (experts None), or an MoE one with `experts` of its
    routed experts counted (all of them, or the top-k a token runs)."""
    h, moe = shape.hidden, shape.moe
    out = sum(shape.attention.weight_elements(h).values()) + x.per_layer
    if experts is None:
        return out + 3 * h * shape.ffn + x.dense_ffn_bias
    out += h * moe.experts + x.per_moe_layer                      # the router
    out += 3 * h * moe.shared_width + (h if moe.shared_expert_gate else 0)
    return out + experts * (3 * h * moe.expert_ffn + x.per_expert)


def params(shape: ModelShape, x: Extras) -> dict:
    h, moe = shape.hidden, shape.moe
    moe_layers = sum(shape.is_moe_layer(i) for i in range(shape.layers))
    dense = (shape.layers - moe_layers) * _layer(shape, x, None)
    tables = shape.vocab * h * (1 if x.tied else 2) + x.lm_head_bias + h      # + the final norm
    total = dense + tables + (moe_layers * _layer(shape, x, moe.experts) if moe else 0)
    active = dense + tables + (moe_layers * _layer(shape, x, moe.top_k) if moe else 0)
    # DeepSeek-V3's MTP module: one more layer, two norms and the projection of [h; embedding]
    mtp_layer = _layer(shape, x, moe.experts if moe else None) + 2 * h * h + 3 * h
    return {"total": total, "active_per_token": active, "mtp": x.mtp_layers * mtp_layer}


def kv_bytes_per_token(shape: ModelShape, full_layers: int) -> int:
    """bf16 cache bytes one token adds, over the layers that keep every token (MLA: its latent
    and rope parts; GQA: K and V of each KV head)."""
    return full_layers * shape.attention.kv_elements_per_token() * KV_BYTES
