"""What an architecture's importer hands back: the model-shape data, where each key came from,
and the parameters hwsim's shape does not carry (biases, norms, sinks, tied tables, MTP)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Extras:
    """Parameter counts outside the model shape (they change no timing hwsim models)."""
    per_layer: int = 0            # attention biases, norms of each layer, sinks
    per_expert: int = 0           # each routed expert's biases (gpt-oss)
    per_moe_layer: int = 0        # router bias or expert-score correction
    dense_ffn_bias: int = 0       # each dense FFN's biases
    lm_head_bias: int = 0
    tied: bool = False            # embedding table and LM head are one tensor
    mtp_layers: int = 0           # DeepSeek-V3/GLM multi-token-prediction layers (not in params.total)


@dataclass
class Mapped:
    shape: dict                                        # the model-shape YAML data
    origin: dict[str, str] = field(default_factory=dict)   # dotted key -> the config field(s)
    extras: Extras = field(default_factory=Extras)
    full_layers: int = 0          # layers that keep every token's KV
    window_layers: int = 0        # layers that keep only a window

    def put(self, key: str, value, source: str) -> None:
        """Set a dotted key of the shape, saying which config field gave it."""
        node = self.shape
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        self.origin[key] = source
