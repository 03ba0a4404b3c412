"""Dense decoders: Llama, Mistral, Qwen2, Qwen3 (every layer attention + one gated MLP)."""

from __future__ import annotations

from hwsim.model.hf_import import attention
from hwsim.model.hf_import.common import base, dense_ffn
from hwsim.model.hf_import.reader import HfConfig
from hwsim.model.hf_import.result import Mapped

KINDS = ("llama", "mistral", "qwen2", "qwen3")


def build(cfg: HfConfig, m: Mapped, name: str, kind: str) -> None:
    layers, hidden, context = base(cfg, m, name, kind)
    bias = cfg.flag("attention_bias")
    # Qwen2's q/k/v projections always carry a bias (its modeling code, no config field)
    attention.gqa(cfg, m, hidden, qkv_bias=bias or kind == "qwen2", o_bias=bias,
                  qk_norm="head" if kind == "qwen3" else "")
    attention.window(cfg, m, kind, layers, context)
    dense_ffn(cfg, m)
    if cfg.flag("mlp_bias"):
        m.extras.dense_ffn_bias = 2 * m.shape["ffn"] + hidden
