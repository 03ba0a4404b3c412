"""Reading a Hugging Face config.json (and hf_quant_config.json beside it) field by field: each
field an architecture reads is recorded, so what is left over is either listed as read and
ignored (hwsim_fields.IGNORED: it does not change the timing) or refused, naming the field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hwsim.errors import ConfigError
from hwsim.io.bounded import LIMITS, read_text

CONFIG = "config.json"
QUANT_CONFIG = "hf_quant_config.json"
_MISSING = object()


def is_hf_path(name: str) -> bool:
    """Whether a model name is a Hugging Face config: a .json file, or a folder holding config.json."""
    p = Path(name)
    return p.suffix == ".json" or (p.is_dir() and (p / CONFIG).is_file())


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(read_text(path, LIMITS["yaml"]))
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path), key="model") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON ({exc.msg}, line {exc.lineno})", file=str(path), line=exc.lineno) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object at the top level", file=str(path), line=1)
    return data


@dataclass
class HfConfig:
    """One config.json as read: its fields, the quantization block (config.json's
    quantization_config, else hf_quant_config.json's quantization), and which fields were read."""

    path: Path
    data: dict
    quant_path: Path | None = None
    quant: dict | None = None
    used: set[str] = field(default_factory=set)

    @classmethod
    def open(cls, name: str) -> "HfConfig":
        p = Path(name)
        if p.is_dir():
            p = p / CONFIG
        if not p.is_file():
            raise ConfigError("no such config.json (a model is a built-in name, a model YAML, a "
                              "config.json or a folder holding one)", file=str(p), key="model")
        cfg = cls(p, _read_json(p))
        if isinstance(cfg.data.get("quantization_config"), dict):
            cfg.quant_path, cfg.quant = p, cfg.data["quantization_config"]
            cfg.used.add("quantization_config")
        elif (p.parent / QUANT_CONFIG).is_file():
            side = _read_json(p.parent / QUANT_CONFIG)
            cfg.quant_path, cfg.quant = p.parent / QUANT_CONFIG, side.get("quantization", side)
        return cfg

    def error(self, key: str, message: str, quant: bool = False) -> ConfigError:
        return ConfigError(message, file=str(self.quant_path if quant else self.path), key=key)

    def get(self, key: str, default=None):
        self.used.add(key)
        value = self.data.get(key, default)
        return default if value is None else value

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def count(self, key: str, default=_MISSING, low: int = 1) -> int:
        """A whole number >= low, or the default when the field is absent or null."""
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error(key, "required field is missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.error(key, f"expected a whole number of at least {low}, got {value!r}")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def choice(self, key: str, allowed: tuple, default=None):
        """A field whose every value hwsim models is listed; any other is refused."""
        value = self.get(key, default)
        if value not in allowed:
            raise self.error(key, f"{value!r} is not modelled by hwsim (it models {', '.join(map(repr, allowed))})")
        return value
