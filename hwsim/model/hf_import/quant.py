"""Quantization as shipped (config.json's quantization_config, or hf_quant_config.json): the
scheme becomes one of hwsim's weight formats (hwsim/model/weight_format.py) for each tensor
class its target and ignore patterns cover; a class half in one format, half in another, is
refused (hwsim stores one format per class). Routers stay bf16 as hwsim times them."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from hwsim.model.hf_import import modules
from hwsim.model.hf_import.reader import HfConfig
from hwsim.model.hf_import.result import Mapped


@dataclass
class Scheme:
    fmt: dict                                  # a TensorWeights block: format, group_size, scale_format
    says: str                                  # the fields it came from
    exclude: list = field(default_factory=list)
    exclude_key: str = ""
    include: list = field(default_factory=lambda: ["Linear"])
    keeps_lm_head: bool = False                # transformers' quantizer leaves the LM head bf16 itself


def _fail(cfg: HfConfig, key: str, message: str):
    return cfg.error(f"quantization_config.{key}" if cfg.quant_path == cfg.path else f"quantization.{key}",
                     message, quant=True)


def _list(cfg: HfConfig, q: dict, key: str) -> list:
    value = q.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(cfg, key, "expected a list of module names or patterns")
    return value


def _int_scheme(cfg: HfConfig, q: dict, method: str) -> Scheme:
    bits = q.get("bits", q.get("w_bit"))
    if bits not in ((4,) if method == "awq" else (2, 3, 4)):
        raise _fail(cfg, "bits", f"{method} with {bits}-bit weights: hwsim has int4, int3 and int2 "
                                 f"({'AWQ: 4 only' if method == 'awq' else 'no int8 weight format'})")
    group = q.get("group_size", q.get("q_group_size", 128))
    group = 0 if group in (-1, None) else group          # -1: one scale per output channel
    s = Scheme({"format": f"int{bits}", "group_size": group, "scale_format": "fp16"},
               f"quant_method {method}, bits {bits}, group_size {q.get('group_size', group)}")
    s.exclude, s.exclude_key = _list(cfg, q, "modules_to_not_convert"), "modules_to_not_convert"
    s.keeps_lm_head = not (method == "gptq" and q.get("lm_head"))
    return s


def _compressed(cfg: HfConfig, q: dict) -> Scheme:
    if q.get("sparsity_config"):
        raise _fail(cfg, "sparsity_config", "sparse weights are not modelled")
    groups = list((q.get("config_groups") or {}).values())
    weights = [g.get("weights") or {} for g in groups if isinstance(g, dict)]
    if not weights or any(w != weights[0] for w in weights):
        raise _fail(cfg, "config_groups", "one weight scheme for every group is modelled (found "
                                          f"{len(weights)} differing or none)")
    w = weights[0]
    bits, typ, strategy, group = w.get("num_bits"), w.get("type"), w.get("strategy"), w.get("group_size")
    if typ == "float" and bits == 8:
        fmt = {"format": "fp8", "group_size": prod(w.get("block_structure") or [1]) if strategy == "block" else 0}
    elif typ == "float" and bits == 4 and group in (16, 32):
        fmt = {"format": "nvfp4" if group == 16 else "mxfp4"}
    elif typ == "int" and bits in (2, 3, 4):
        fmt = {"format": f"int{bits}", "group_size": group if strategy == "group" else 0, "scale_format": "bf16"}
    else:
        raise _fail(cfg, "config_groups", f"{typ} {bits}-bit weights ({strategy}) have no hwsim weight format")
    targets = [t for g in groups for t in (g.get("targets") or [])]
    s = Scheme(fmt, f"compressed-tensors {typ} {bits}-bit, strategy {strategy}", include=targets or ["Linear"])
    s.exclude, s.exclude_key = _list(cfg, q, "ignore"), "ignore"
    return s


def _modelopt(cfg: HfConfig, q: dict) -> Scheme:
    algo = q.get("quant_algo")
    table = {"FP8": {"format": "fp8", "group_size": 0},
             "FP8_PB_WO": {"format": "fp8", "group_size": 128 * 128},
             "NVFP4": {"format": "nvfp4", "group_size": q.get("group_size") or 16},
             "MXFP4": {"format": "mxfp4"},
             "W4A16_AWQ": {"format": "int4", "group_size": q.get("group_size") or 128, "scale_format": "fp16"}}
    if algo not in table:
        raise _fail(cfg, "quant_algo", f"{algo!r} is not modelled (hwsim maps {', '.join(table)})")
    s = Scheme(table[algo], f"ModelOpt quant_algo {algo}")
    s.exclude_key = "exclude_modules" if "exclude_modules" in q or "ignore" not in q else "ignore"
    s.exclude = _list(cfg, q, s.exclude_key)
    return s


def scheme(cfg: HfConfig) -> Scheme | None:
    q = cfg.quant
    if q is None:
        return None
    method = q.get("quant_method", "modelopt" if "quant_algo" in q else None)
    if method == "fp8":
        block = q.get("weight_block_size")
        s = Scheme({"format": "fp8", "group_size": prod(block) if block else 0, "scale_format": "fp32"},
                   f"quant_method fp8, weight_block_size {block}", keeps_lm_head=True)
        s.exclude, s.exclude_key = _list(cfg, q, "modules_to_not_convert"), "modules_to_not_convert"
        return s
    if method in ("awq", "gptq"):
        return _int_scheme(cfg, q, method)
    if method == "compressed-tensors":
        return _compressed(cfg, q)
    if method == "mxfp4":
        s = Scheme({"format": "mxfp4"}, "quant_method mxfp4 (e2m1 codes, an e8m0 scale per 32)", keeps_lm_head=True)
        s.exclude, s.exclude_key = _list(cfg, q, "modules_to_not_convert"), "modules_to_not_convert"
        return s
    if method == "modelopt":
        return _modelopt(cfg, q)
    raise _fail(cfg, "quant_method", f"{method!r} is not modelled (hwsim reads fp8, compressed-tensors, "
                                     "awq, gptq, mxfp4 and ModelOpt's fp8/nvfp4)")


def _quantized(cfg: HfConfig, s: Scheme, cls: str, names: list[str]) -> bool | None:
    """Whether every module of the class is quantized (None: the class has none)."""
    if not names:
        return None
    if cls == "lm_head" and s.keeps_lm_head:
        return False
    picked = [n for n in names if any(modules.matches(p, n) for p in s.include)
              and not any(modules.matches(p, n) for p in s.exclude)]
    if picked and len(picked) < len(names):
        left = next(n for n in names if n not in picked)
        raise _fail(cfg, s.exclude_key or "config_groups",
                    f"quantizes {picked[0]} but not {left}: hwsim stores one format per tensor class ({cls})")
    return bool(picked)


def apply(cfg: HfConfig, m: Mapped, kind: str) -> None:
    """The checkpoint's formats as the shape's `weights:` (classes left bf16 are not written)."""
    s = scheme(cfg)
    if s is None:
        return
    names = modules.by_class(m.shape, kind)
    q = {cls: _quantized(cfg, s, cls, ns) for cls, ns in names.items()}
    ffn_class = "experts" if m.shape.get("moe") else "dense"
    if q["dense"] is not None and q["experts"] is not None and q["dense"] != q["experts"]:
        raise _fail(cfg, s.exclude_key or "config_groups",
                    "the dense FFN or shared experts and the routed experts in different formats: hwsim "
                    "stores the dense FFN and shared experts in the experts' format")
    classes = {"experts": q[ffn_class], "attention": q["attention"], "embeddings": q["lm_head"]}
    for cls, on in classes.items():
        if on:
            for key, value in s.fmt.items():
                m.put(f"weights.{cls}.{key}", value, s.says + (f"; {s.exclude_key} leaves it quantized"
                                                               if s.exclude_key else ""))
