"""Model shapes as data: config.json numbers of the built-in models (hwsim/data/models/*.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from hwsim.config.scenario import TensorWeights
from hwsim.config.strict import Strict

MODEL_DIR = Path(__file__).resolve().parent.parent / "data" / "models"


# `sliding_window_layers`: which layers attend over the window, by the layer's index
WINDOWED_LAYERS = {"all": lambda layer: True, "even": lambda layer: layer % 2 == 0,
                   "odd": lambda layer: layer % 2 == 1}


class _Attention(Strict):
    """What every attention block has: query heads, and (gpt-oss) a sliding window and sinks."""
    latent: ClassVar[bool] = False      # multi-head latent attention (MLA)

    heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    # gpt-oss: every other layer attends over a sliding window of recent tokens only
    sliding_window: int = Field(0, ge=0, description="tokens a sliding-window layer attends over (0: none)")
    sliding_window_layers: Literal[tuple(WINDOWED_LAYERS)] = Field(
        "even", description="which layers use the window (gpt-oss: even layers, from 0)")
    sinks: bool = Field(False, description="learned per-head attention-sink logits (gpt-oss): one more "
                                           "softmax term per head, no memory traffic; not timed")

    def window_at(self, layer: int) -> int:
        """The sliding window of this layer, or 0 when it attends over the whole context."""
        if not self.sliding_window:
            return 0
        return self.sliding_window if WINDOWED_LAYERS[self.sliding_window_layers](layer) else 0

    def weight_elements(self, hidden: int) -> dict[str, int]:
        """Weight elements of each projection, the output projection included."""
        out = {name: k * n for name, k, n, _ in self.projections(hidden)}
        out["o_proj"] = self.o_proj_in * hidden
        return out

    def kv_elements_per_token(self) -> int:
        """Cached elements per token per layer (all cached heads)."""
        return self.cached_heads * self.cached_elements_per_head


class GqaAttention(_Attention):
    """Grouped-query attention: K and V cached per KV head."""

    kind: Literal["gqa"] = "gqa"
    kv_heads: int = Field(1, ge=1)
    qk_norm: bool = False

    @model_validator(mode="after")
    def _check(self):
        if self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        return self

    def projections(self, hidden: int) -> list[tuple[str, int, int, tuple[str, ...]]]:
        """(name, K, N, activations it writes) of each input projection, in stream order."""
        return [("qkv", hidden, (self.heads + 2 * self.kv_heads) * self.head_dim, ("qkv",))]

    @property
    def head_norms(self) -> list[tuple[str, int]]:
        return [("q_norm", self.heads), ("k_norm", self.kv_heads)] if self.qk_norm else []

    @property
    def cached_heads(self) -> int:
        return self.kv_heads

    @property
    def cached_elements_per_head(self) -> int:
        return 2 * self.head_dim                      # K and V

    @property
    def dims(self) -> tuple[int, int]:
        """(query-key dim, value dim) of the attention matmuls."""
        return self.head_dim, self.head_dim

    @property
    def appends(self) -> list[tuple[str, int]]:
        """(kernel, elements per token) of the cache writes of a decode."""
        return [("k_write", self.kv_heads * self.head_dim), ("v_write", self.kv_heads * self.head_dim)]

    @property
    def o_proj_in(self) -> int:
        return self.heads * self.head_dim


class MlaAttention(_Attention):
    """Multi-head latent attention (DeepSeek): the cache holds kv_lora_rank + qk_rope_dim per
    token, one latent 'head'; decode absorbs kv_b, so queries move into the latent space."""

    kind: Literal["mla"]
    latent: ClassVar[bool] = True
    q_lora_rank: int = Field(0, ge=0)
    kv_lora_rank: int = Field(ge=1)
    qk_nope_dim: int = Field(0, ge=0)
    qk_rope_dim: int = Field(ge=1)
    v_head_dim: int = Field(ge=1)

    @property
    def head_norms(self) -> list[tuple[str, int]]:
        return []

    def projections(self, hidden: int) -> list[tuple[str, int, int, tuple[str, ...]]]:
        q_in = self.q_lora_rank or hidden
        out = [("q_a", hidden, self.q_lora_rank, ())] if self.q_lora_rank else []
        return out + [("q_b", q_in, self.heads * (self.qk_nope_dim + self.qk_rope_dim), ()),
                      ("kv_a", hidden, self.kv_lora_rank + self.qk_rope_dim, ()),
                      ("kv_b", self.kv_lora_rank, self.heads * (self.qk_nope_dim + self.v_head_dim), ())]

    @property
    def cached_heads(self) -> int:
        return 1

    @property
    def cached_elements_per_head(self) -> int:
        return self.kv_lora_rank + self.qk_rope_dim   # the latent serves as both K and V

    @property
    def dims(self) -> tuple[int, int]:
        return self.kv_lora_rank + self.qk_rope_dim, self.kv_lora_rank

    @property
    def appends(self) -> list[tuple[str, int]]:
        return [("kv_write", self.kv_elements_per_token())]

    @property
    def o_proj_in(self) -> int:
        return self.heads * self.v_head_dim


def _attention_kind(value) -> str:
    if isinstance(value, dict):
        return value.get("kind", "gqa")
    return getattr(value, "kind", "gqa")


Attention = Annotated[Annotated[GqaAttention, Tag("gqa")] | Annotated[MlaAttention, Tag("mla")],
                      Discriminator(_attention_kind)]


class Moe(Strict):
    experts: int = Field(ge=1)
    top_k: int = Field(ge=1)
    expert_ffn: int = Field(ge=1)
    shared_experts: int = Field(0, ge=0)
    shared_ffn: int = Field(0, ge=0, description="intermediate size of each shared expert")
    shared_expert_gate: bool = Field(False, description="the shared experts' output is scaled by "
                                     "sigmoid(x . w) (Qwen1.5/Qwen2-MoE's shared_expert_gate)")
    dense_layers: int = Field(0, ge=0, description="leading layers with a dense FFN instead")
    groups: int = Field(1, ge=1, description="expert groups for group-limited routing")
    topk_groups: int = Field(1, ge=1)
    scoring: Literal["softmax", "sigmoid"] = "softmax"

    @property
    def shared_width(self) -> int:
        """Intermediate size of the one MLP the shared experts are computed as."""
        return self.shared_experts * self.shared_ffn

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
    tied_embeddings: bool = Field(False, description="the LM head is the embedding table itself (config.json's "
                                  "tie_word_embeddings): one vocab x hidden tensor in memory, not two")
    weights: dict[Literal["experts", "attention", "embeddings"], TensorWeights] = Field(
        default_factory=dict, description="the checkpoint's own weight formats per tensor class "
                                          "(a scenario's weights: block overrides them; default bf16)")

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.moe.dense_layers


def builtin_models() -> list[str]:
    return sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))
