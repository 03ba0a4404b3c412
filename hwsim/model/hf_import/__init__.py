"""Any model from its Hugging Face config.json (issue 46, docs/models.md): `model: PATH` in a
scenario, --set or a sweep, and `hwsim model import PATH`. One module per architecture family
(dense, moe, deepseek), one for quantization; what the loader calls is load() and is_hf_path()."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from hwsim.config.limits import model_problems
from hwsim.errors import ConfigError
from hwsim.model.hf_import import deepseek, dense, moe, quant
from hwsim.model.hf_import.counts import kv_bytes_per_token, params
from hwsim.model.hf_import.ignored import reason
from hwsim.model.hf_import.reader import CONFIG, QUANT_CONFIG, HfConfig, is_hf_path
from hwsim.model.hf_import.result import Mapped
from hwsim.model.shapes import ModelShape

__all__ = ["CONFIG", "QUANT_CONFIG", "Imported", "context_problems", "import_config", "is_hf_path", "load"]

FAMILIES = {**dict.fromkeys(dense.KINDS, dense.build), **dict.fromkeys(moe.KINDS, moe.build),
            **dict.fromkeys(deepseek.KINDS, deepseek.build)}
# model types people ask for that hwsim cannot time: linear attention, state-space layers
NOT_MODELLED = {"qwen3_next": "Gated DeltaNet linear-attention layers", "jamba": "Mamba layers",
                "mamba": "Mamba layers", "mamba2": "Mamba layers", "falcon_h1": "Mamba layers",
                "nemotron_h": "Mamba layers", "bamba": "Mamba layers", "granitemoehybrid": "Mamba layers",
                "minimax": "lightning (linear) attention layers", "minimax_m1": "lightning attention layers",
                "rwkv": "RWKV recurrence", "recurrent_gemma": "recurrent layers", "zamba2": "Mamba layers",
                "lfm2": "convolution layers", "kimi_linear": "Kimi Delta linear-attention layers"}


@dataclass
class Imported:
    cfg: HfConfig
    mapped: Mapped
    shape: ModelShape
    ignored: dict[str, str]            # field -> why it changes no timing

    def figures(self) -> dict:
        """The public contract of `hwsim model import --json`."""
        return {"model": self.shape.name, "config": str(self.cfg.path),
                "model_type": self.cfg.data.get("model_type"),
                "params": params(self.shape, self.mapped.extras),
                "kv_bytes_per_token": kv_bytes_per_token(self.shape, self.mapped.full_layers),
                "sliding_window_layers": self.mapped.window_layers,
                "read_and_ignored": self.ignored}


def _name(cfg: HfConfig) -> str:
    folder = cfg.path.parent.name if cfg.path.name == "config.json" else cfg.path.stem
    return folder or "imported"


def _validate(cfg: HfConfig, m: Mapped) -> ModelShape:
    for key, problem in model_problems(m.shape):
        raise cfg.error(m.origin.get(key, key), f"{problem} (hwsim's {key})")
    try:
        return ModelShape.model_validate(m.shape)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-after", "gqa", "mla")))
        raise cfg.error(m.origin.get(key, key), f"{err['msg']} (hwsim's {key})") from None


def _leftovers(cfg: HfConfig) -> dict[str, str]:
    """Fields no importer read: listed when they change no timing, refused otherwise."""
    ignored = {}
    for key in cfg.data:
        why = reason(key)
        if key in cfg.used:
            if why:
                ignored[key] = why
            continue
        if why is None:
            raise cfg.error(key, f"unknown field for model_type {cfg.data.get('model_type')!r}: hwsim does "
                                 "not know whether it changes the compute (docs/models.md)")
        ignored[key] = why
    return ignored


def import_config(name: str) -> Imported:
    cfg = HfConfig.open(name)
    kind = cfg.get("model_type")
    if kind in NOT_MODELLED:
        raise cfg.error("model_type", f"{kind!r} has {NOT_MODELLED[kind]}, which hwsim does not model")
    if kind not in FAMILIES:
        raise cfg.error("model_type", f"unknown model_type {kind!r} (hwsim imports {', '.join(sorted(FAMILIES))})")
    m = Mapped({})
    FAMILIES[kind](cfg, m, _name(cfg), kind)
    quant.apply(cfg, m, kind)
    return Imported(cfg, m, _validate(cfg, m), _leftovers(cfg))


def load(name: str) -> ModelShape:
    """The model shape of a config.json (or a folder holding one), for the loader."""
    return import_config(name).shape


def context_problems(model_name: str, longest: int):
    """(key, message) when the scenario's longest context passes the config's max_position_embeddings."""
    if not is_hf_path(model_name):
        return
    cfg = HfConfig.open(model_name)
    limit = cfg.data.get("max_position_embeddings")
    if isinstance(limit, int) and longest > limit:
        yield "model", (f"the scenario's longest context, {longest} tokens, passes the model's "
                        f"max_position_embeddings {limit} ({cfg.path})")
