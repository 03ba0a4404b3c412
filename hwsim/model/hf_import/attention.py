"""Attention of every family: GQA (head_dim honoured, biases, QK-norm, sinks) or DeepSeek's MLA,
and which layers keep only a sliding window (layer_types, or the family's own rule)."""

from __future__ import annotations

from hwsim.model.hf_import.reader import HfConfig
from hwsim.model.hf_import.result import Mapped

LAYER_TYPES = ("full_attention", "sliding_attention")
# Families whose sliding_window, when set, applies to every layer (Mistral's modeling code)
WINDOW_ON_EVERY_LAYER = ("mistral", "mixtral", "phimoe")
# Qwen2/Qwen3: the window only with use_sliding_window, from layer max_window_layers on
WINDOW_FROM_MAX_WINDOW_LAYERS = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")


def gqa(cfg: HfConfig, m: Mapped, hidden: int, *, qkv_bias: bool = False, o_bias: bool = False,
        qk_norm: str = "") -> None:
    """Grouped-query attention. qk_norm: '' none, 'head' (per-head RMSNorm, Qwen3/GLM),
    'full' (over all heads, OLMoE)."""
    heads = cfg.count("num_attention_heads")
    kv = cfg.count("num_key_value_heads", heads)
    if cfg.has("head_dim"):
        head_dim, src = cfg.count("head_dim"), "head_dim"
    else:
        if hidden % heads:
            raise cfg.error("num_attention_heads", f"hidden_size {hidden} is not a multiple of "
                                                   f"{heads} heads, and there is no head_dim")
        head_dim, src = hidden // heads, "hidden_size / num_attention_heads"
    if heads % kv:
        raise cfg.error("num_key_value_heads", f"{heads} query heads are not a multiple of {kv} KV heads")
    m.put("attention.kind", "gqa", "model_type (grouped-query attention)")
    m.put("attention.heads", heads, "num_attention_heads")
    m.put("attention.kv_heads", kv, "num_key_value_heads")
    m.put("attention.head_dim", head_dim, src)
    if qk_norm:
        m.put("attention.qk_norm", True, "the family's QK-norm" + (" (use_qk_norm)" if cfg.has("use_qk_norm") else ""))
        m.extras.per_layer += 2 * head_dim if qk_norm == "head" else (heads + kv) * head_dim
    m.extras.per_layer += ((heads + 2 * kv) * head_dim if qkv_bias else 0) + (hidden if o_bias else 0)


def mla(cfg: HfConfig, m: Mapped) -> None:
    """DeepSeek's multi-head latent attention (the cache: kv_lora_rank + qk_rope_head_dim per token)."""
    heads = cfg.count("num_attention_heads")
    cfg.get("num_key_value_heads")                     # MLA caches one latent: KV heads do not apply
    cfg.get("head_dim"), cfg.get("qk_head_dim")        # newer transformers write rope / nope + rope here
    nope, rope = cfg.count("qk_nope_head_dim", low=0), cfg.count("qk_rope_head_dim")
    q_lora = cfg.count("q_lora_rank", 0, low=0)
    kv_lora = cfg.count("kv_lora_rank")
    m.put("attention.kind", "mla", "model_type (multi-head latent attention)")
    m.put("attention.heads", heads, "num_attention_heads")
    m.put("attention.head_dim", nope + rope, "qk_nope_head_dim + qk_rope_head_dim")
    m.put("attention.q_lora_rank", q_lora, "q_lora_rank (null: 0, queries projected from hidden)")
    m.put("attention.kv_lora_rank", kv_lora, "kv_lora_rank")
    m.put("attention.qk_nope_dim", nope, "qk_nope_head_dim")
    m.put("attention.qk_rope_dim", rope, "qk_rope_head_dim")
    m.put("attention.v_head_dim", cfg.count("v_head_dim"), "v_head_dim")
    m.extras.per_layer += q_lora + kv_lora                 # q_a_layernorm, kv_a_layernorm
    if cfg.flag("attention_bias"):
        raise cfg.error("attention_bias", "MLA with biased projections is not modelled")


def _window_layers(cfg: HfConfig, kind: str, layers: int) -> tuple[list[int], str]:
    """Indices of the layers that attend over a window, and the field that says so."""
    cfg.get("sliding_window")
    if kind in WINDOW_FROM_MAX_WINDOW_LAYERS:
        cfg.get("max_window_layers"), cfg.get("use_sliding_window")    # the window's switch
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise cfg.error("layer_types", f"expected a list of {layers} layer types (num_hidden_layers)")
        for i, t in enumerate(types):
            if t not in LAYER_TYPES:
                raise cfg.error("layer_types", f"layer {i} is {t!r}: hwsim models softmax attention "
                                               f"layers only ({', '.join(LAYER_TYPES)})")
        return [i for i, t in enumerate(types) if t == "sliding_attention"], "layer_types"
    if not cfg.has("sliding_window"):
        return [], ""
    if kind in WINDOW_ON_EVERY_LAYER:
        return list(range(layers)), "sliding_window (every layer, as the family's code applies it)"
    if kind in WINDOW_FROM_MAX_WINDOW_LAYERS:
        if not cfg.flag("use_sliding_window"):
            return [], ""
        first = cfg.count("max_window_layers", 0, low=0)
        return list(range(first, layers)), "use_sliding_window, max_window_layers"
    if kind == "gpt_oss":
        return list(range(0, layers, 2)), "sliding_window (gpt-oss: even layers)"
    raise cfg.error("sliding_window", f"hwsim does not know which layers of a {kind} model it applies to")


def window(cfg: HfConfig, m: Mapped, kind: str, layers: int, max_context: int) -> None:
    """The sliding window and its layers: every layer, the even or the odd ones, or none."""
    sliding, src = _window_layers(cfg, kind, layers)
    size = cfg.count("sliding_window", 0, low=0) if sliding else 0
    if size and size >= max_context:
        sliding = []          # a window as long as the longest context keeps every token (Phi-3.5-MoE)
    m.full_layers, m.window_layers = layers - len(sliding), len(sliding)
    if not sliding or not size:
        m.full_layers, m.window_layers = layers, 0
        return
    which = ("all" if len(sliding) == layers else "even" if sliding == list(range(0, layers, 2))
             else "odd" if sliding == list(range(1, layers, 2)) else None)
    if which is None:
        raise cfg.error(src.split(",")[0].split(" ")[0], f"window layers {sliding[:6]}...: hwsim models a "
                                                          "window on every layer, the even or the odd ones")
    m.put("attention.sliding_window", size, "sliding_window")
    m.put("attention.sliding_window_layers", which, src)
