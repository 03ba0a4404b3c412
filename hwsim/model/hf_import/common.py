"""What every family shares: layers, hidden size, vocabulary, tied tables, the MLP's activation."""

from __future__ import annotations

from hwsim.model.hf_import.reader import HfConfig
from hwsim.model.hf_import.result import Mapped

# The gated MLP's activation (SwiGLU, GeGLU): one elementwise op whichever, so no timing change
GATED_ACTIVATIONS = ("silu", "swish", "swiglu", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def base(cfg: HfConfig, m: Mapped, name: str, kind: str) -> tuple[int, int, int]:
    """(layers, hidden, max context) of any family, and the shape's common keys."""
    layers, hidden = cfg.count("num_hidden_layers"), cfg.count("hidden_size")
    m.put("name", name, "the config's folder (or file) name")
    m.put("source", f"Hugging Face config.json ({kind}) imported by hwsim model import: {cfg.path}",
          "model_type and the file read")
    m.put("layers", layers, "num_hidden_layers")
    m.put("hidden", hidden, "hidden_size")
    m.put("vocab", cfg.count("vocab_size"), "vocab_size")
    m.extras.per_layer += 2 * hidden                       # input and post-attention norms
    m.extras.tied = cfg.flag("tie_word_embeddings", False)
    if m.extras.tied:                                      # kept off the shape of an untied model
        m.put("tied_embeddings", True, "tie_word_embeddings")
    cfg.choice("hidden_act", GATED_ACTIVATIONS, "silu")
    cfg.get("torch_dtype")
    return layers, hidden, cfg.count("max_position_embeddings", 1 << 30)


def dense_ffn(cfg: HfConfig, m: Mapped, key: str = "intermediate_size") -> None:
    m.put("ffn", cfg.count(key), key)
