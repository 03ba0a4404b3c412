"""Model shapes as data: config.json numbers of the built-in models (hwsim/data/models/*.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from hwsim.config.scenario import TensorWeights
from hwsim.config.strict import Strict

MODEL_DIR = Path(__file__).resolve().parent.parent / "data" / "models"


class Attention(Strict):
    kind: Literal["gqa", "mla"] = "gqa"
    heads: int = Field(ge=1)
    kv_heads: int = Field(1, ge=1)
    head_dim: int = Field(ge=1)
    qk_norm: bool = False
    # Multi-head latent attention (DeepSeek): the cache holds kv_lora_rank + qk_rope_dim per token.
    q_lora_rank: int = Field(0, ge=0)
    kv_lora_rank: int = Field(0, ge=0)
    qk_nope_dim: int = Field(0, ge=0)
    qk_rope_dim: int = Field(0, ge=0)
    v_head_dim: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _check(self):
        if self.kind == "mla" and not (self.kv_lora_rank and self.qk_rope_dim and self.v_head_dim):
            raise ValueError("mla attention needs kv_lora_rank, qk_rope_dim and v_head_dim")
        if self.kind == "gqa" and self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        return self

    def kv_elements_per_token(self) -> int:
        """Cached elements per token per layer (K and V together, or MLA's latent)."""
        if self.kind == "mla":
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.kv_heads * self.head_dim


class Moe(Strict):
    experts: int = Field(ge=1)
    top_k: int = Field(ge=1)
    expert_ffn: int = Field(ge=1)
    shared_experts: int = Field(0, ge=0)
    shared_ffn: int = Field(0, ge=0, description="intermediate size of each shared expert")
    dense_layers: int = Field(0, ge=0, description="leading layers with a dense FFN instead")
    groups: int = Field(1, ge=1, description="expert groups for group-limited routing")
    topk_groups: int = Field(1, ge=1)
    scoring: Literal["softmax", "sigmoid"] = "softmax"

    @model_validator(mode="after")
    def _check(self):
        if self.top_k > self.experts:
            raise ValueError("top_k cannot exceed experts")
        return self


class ModelShape(Strict):
    name: str
    source: str = Field(min_length=3)
    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    vocab: int = Field(ge=1)
    attention: Attention
    ffn: int = Field(0, ge=0, description="dense FFN intermediate size (dense layers)")
    moe: Moe | None = None
    weight_bytes: float = Field(2.0, gt=0, description="bytes per weight element (2 = bf16)")
    weights: dict[Literal["experts", "attention", "embeddings"], TensorWeights] = Field(
        default_factory=dict, description="the checkpoint's own weight formats per tensor class "
                                          "(a scenario's weights: block overrides them; default bf16)")

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.moe.dense_layers


def builtin_models() -> list[str]:
    return sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))
