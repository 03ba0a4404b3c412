"""The scenario's `kv_cache` block: how the KV cache is stored (issue 42: one class per storage
kind, a union told apart by the widths and the element) and the published schemes (presets).
The storage model that reads it: hwsim/workload/kv_format.py."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, TypeAdapter, model_validator

from hwsim.config.dequant import KernelFamilyName as KernelFamily, kernel_dequant
from hwsim.config.strict import Strict
from hwsim.config.variants import Variant, one_of_modes


class TokenClass(Strict):
    tokens: int = Field(0, ge=0, description="how many tokens are in this class")
    bits: float = Field(16, description="stored bits per element for this class")


class OutlierClass(Strict):
    fraction: float = Field(0.0, ge=0, le=1, description="share of non-sink, non-recent tokens kept wider")
    bits: float = Field(16, description="stored bits per element for outlier tokens")


class VectorQuant(Strict):
    entries: int = Field(256, ge=2, description="codebook entries (held in shared memory)")
    dims: int = Field(4, ge=1, description="elements encoded by one code")


# Published schemes, as ../shared/reference/literature.md section 2 describes them; any key set next to a preset
# overrides the preset's value. The adaptive presets are the design brief's scheme.
KV_PRESETS: dict[str, dict] = {
    "bf16": {"bits": 16},
    "fp8": {"bits": 8, "element": "fp8"},
    "kivi-2": {"bits": 2, "group_size": 32, "recent": {"tokens": 128, "bits": 16}},
    "kvquant-3-1pct": {"bits": 3, "sinks": {"tokens": 1, "bits": 16},
                       "outliers": {"fraction": 0.01, "bits": 16}},
    "skvq-2-1.5": {"key_bits": 2, "value_bits": 1.5, "group_size": 128, "scale_format": "fp8",
                   "sinks": {"tokens": 5, "bits": 16}, "recent": {"tokens": 128, "bits": 16}},
    "qserve-kv4": {"bits": 4, "group_size": 128},
    "adaptive-2": {"bits": 2, "group_size": 128, "sinks": {"tokens": 4, "bits": 8},
                   "outliers": {"fraction": 0.02, "bits": 4}},
    "adaptive-1.5": {"bits": 1.5, "group_size": 128, "sinks": {"tokens": 4, "bits": 8},
                     "outliers": {"fraction": 0.02, "bits": 4}},
}
SUPPORTED_INT_BITS = {1, 1.5, 2, 3, 4, 5, 6, 8, 16}
HQQ_BITS = (1, 2, 4, 8)      # HQQ's uint8 packings (hqq/core/bitpack.py; 3 bits packs into int32)


def _with_preset(data):
    """A kv_cache block with its preset's keys under the ones it sets (a dict block's nested
    keys merged one by one)."""
    if isinstance(data, dict) and data.get("preset") in KV_PRESETS:
        merged = dict(KV_PRESETS[data["preset"]])
        for key, value in data.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return merged
    return data


class KvCache(Variant):
    """How the KV cache is stored, one class per kind (issue 42): bf16 (every width 16 bits) or
    codes of one element kind (int, fp8, vq). The kind is read from the widths and `element`,
    so a key of a quantized cache (group_size, kernel, vq...) set on a bf16 one, or scales on
    fp8 codes, is an unknown key at load. `dequant` is every kind's: a sweep pairs a decoder
    profile with dequant decoder over bf16 points too, and the profile is checked for it."""
    MODE: ClassVar[str] = ""         # the kind's label in an error ("unknown key of element fp8")
    preset: Literal["bf16", "fp8", "kivi-2", "kvquant-3-1pct", "skvq-2-1.5", "qserve-kv4",
                    "adaptive-2", "adaptive-1.5"] | None = Field(None, description="a published scheme")
    bits: float = Field(16, description="routine-token bits for K and V (16 = unquantized bf16)")
    key_bits: float | None = Field(None, description="routine-token bits for K (default: bits)")
    value_bits: float | None = Field(None, description="routine-token bits for V (default: bits)")
    sinks: TokenClass = TokenClass()
    outliers: OutlierClass = OutlierClass()
    recent: TokenClass = TokenClass()
    dequant: Literal["software", "decoder", "unfused"] = Field(
        "software", description="software: unpack in registers before the MMA; decoder: a native "
                                "sub-byte decoder of the profile; unfused: expand to bf16 in HBM first")

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, data):
        return _with_preset(data)

    @model_validator(mode="after")
    def _widths_in_range(self):
        if any(not 0 < b <= 16 for b in self.widths()):
            raise ValueError("every stored width must be above 0 and at most 16 bits")
        return self

    def widths(self) -> list[float]:
        w = [self.bits if self.key_bits is None else self.key_bits,
             self.bits if self.value_bits is None else self.value_bits, self.sinks.bits, self.recent.bits]
        if self.outliers.fraction:
            w.append(self.outliers.bits)
        return w

    @property
    def quantized(self) -> bool:
        """Some width under 16 bits: a dequant kernel reads the cache."""
        return True

    def problems(self, head_dim: int, shared_memory_bytes: float):
        """(key, message) for this storage on a model's head dim and a chip's shared memory."""
        return ()


class Bf16Kv(KvCache):
    MODE = "a bf16 cache (every kv_cache width 16 bits)"

    @property
    def quantized(self) -> bool:
        return False


class QuantizedKv(KvCache):
    """Codes below 16 bits, expanded for the MMA by `dequant` with a kernel family."""
    ELEMENT: ClassVar[str] = ""      # the element kind, as the KV storage model and a decoder's formats name it
    kernel: KernelFamily | None = Field(
        None, description="dequant kernel family (docs/kv_cache.md): naive = the measured fused Triton "
                          "kernel (the fit), fast = calibration/fast_kv_attn.py (counts fitted on an H100, "
                          "issue 44), native-decoder = dequant decoder; unset: the fastest measured "
                          "family of the profile (fast on the Hopper profiles; naive with dequant "
                          "unfused), or native-decoder with dequant decoder")

    @model_validator(mode="after")
    def _kernel_sets_dequant(self):
        dequant = kernel_dequant(self.kernel, self.dequant if "dequant" in self.model_fields_set else None)
        object.__setattr__(self, "dequant", dequant or self.dequant)
        return self


class ScaledKv(QuantizedKv):
    """Codes with a scale (and a zero point) per group of elements."""
    group_size: int = Field(128, ge=1, description="elements sharing one scale (and zero point)")
    scale_format: Literal["fp16", "fp8", "pow2"] = "fp16"
    zero_point: bool = True

    def problems(self, head_dim: int, shared_memory_bytes: float):
        if head_dim % self.group_size and self.group_size < head_dim:
            yield "kv_cache.group_size", f"group_size {self.group_size} does not divide the head dim {head_dim}"


class IntKv(ScaledKv):
    MODE, ELEMENT = "element=int", "int"
    element: Literal["int"] = Field("int", description="integer codes, fp8, or vector codes")
    relayout_ops_subbyte: float = Field(
        15.5, ge=0, description="software dequant: ops per element to move packed sub-byte codes into "
                                "MMA fragment order (calibration/fit_kv_dequant.py: the fused Triton "
                                "low-bit attention kernel measured on an H200; docs/kv_cache.md)")
    relayout_ops_byte: float = Field(
        8.0, ge=0, description="the same for byte-wide (8-bit) codes, from the same measurement")

    expansion: Literal["one-pass", "hqq"] = Field(
        "one-pass", description="dequant unfused: the kernels that write the bf16 copy: one-pass (one "
                                "expansion kernel a layer) or hqq (HQQ's PyTorch dequant as transformers' "
                                "QuantizedCache runs it: per bit slice an and, a shift and a cast, the zero "
                                "and scale applied, the cat with the bf16 residual; implies dequant unfused)")

    @model_validator(mode="after")
    def _int_widths(self):
        bad = [b for b in self.widths() if b not in SUPPORTED_INT_BITS]
        if bad:
            raise ValueError(f"integer codes support {sorted(SUPPORTED_INT_BITS)} bits, not {bad[0]:g}")
        return self

    @model_validator(mode="after")
    def _hqq_is_unfused(self):
        if self.expansion != "hqq":
            # the expansion pass's kernels exist only when the cache is expanded first: set under another
            # dequant the key would do nothing, refused here rather than warned inert (config/inert.py)
            if "expansion" in self.model_fields_set and self.dequant != "unfused":
                raise ValueError(f"expansion chooses the kernels of the unfused expansion pass: set it with "
                                 f"dequant unfused, not dequant {self.dequant}")
            return self
        if self.dequant != "unfused" and ("dequant" in self.model_fields_set or self.kernel is not None):
            raise ValueError(f"expansion hqq is an unfused expansion pass (dequant unfused, kernel naive "
                             f"or unset), not dequant {self.dequant}")
        bad = [b for b in self.widths()[:2] if b not in HQQ_BITS]
        if bad:
            raise ValueError(f"expansion hqq unpacks {'/'.join(map(str, HQQ_BITS))}-bit codes, not {bad[0]:g}")
        object.__setattr__(self, "dequant", "unfused")
        return self


class Fp8Kv(QuantizedKv):
    """e4m3 codes, no scales (the fp8 format carries its own exponent)."""
    MODE, ELEMENT = "element=fp8", "fp8"
    element: Literal["fp8"] = "fp8"

    @model_validator(mode="after")
    def _fp8_widths(self):
        if any(b != 8 for b in self.widths() if b < 16):
            raise ValueError("element fp8 stores 8 bits per element; other widths need element int or vq")
        return self


class VqKv(ScaledKv):
    """Vector codes: one code for `vq.dims` elements, looked up in a shared-memory codebook."""
    MODE, ELEMENT = "element=vq", "vq"
    element: Literal["vq"] = "vq"
    vq: VectorQuant = VectorQuant()

    @model_validator(mode="after")
    def _code_width(self):
        code_bits = math.log2(self.vq.entries) / self.vq.dims
        if any(abs(b - code_bits) > 1e-6 for b in self.widths()[:2] if b < 16):
            raise ValueError(f"vq with {self.vq.entries} entries over {self.vq.dims} dims stores "
                             f"{code_bits:g} bits per element; set bits to that")
        return self

    def codebook_bytes(self) -> int:
        """fp16 entries of `vq.dims` elements each."""
        return self.vq.entries * self.vq.dims * 2

    def problems(self, head_dim: int, shared_memory_bytes: float):
        yield from super().problems(head_dim, shared_memory_bytes)
        if self.codebook_bytes() > shared_memory_bytes / 2:
            yield "kv_cache.vq.entries", (f"codebook of {self.codebook_bytes()} bytes does not fit in half "
                                          f"of the {shared_memory_bytes:.0f} bytes of shared memory per SM")


KV_KINDS = (Bf16Kv, IntKv, Fp8Kv, VqKv)


def _kv_kind(value) -> str:
    """The storage kind of a kv_cache block: bf16 when every width is 16 bits, else its element's."""
    if isinstance(value, KvCache):
        return type(value).MODE
    data = _with_preset(value) if isinstance(value, dict) else {}
    element = data.get("element", "int")
    kinds = {k.ELEMENT: k.MODE for k in KV_KINDS if issubclass(k, QuantizedKv)}
    if not isinstance(element, str) or element not in kinds:
        return "?"
    try:
        bits = float(data.get("bits", 16))
        classes = [data.get(c) or {} for c in ("sinks", "recent", "outliers")]
        widths = [float(bits if data.get("key_bits") is None else data["key_bits"]),
                  float(bits if data.get("value_bits") is None else data["value_bits"]),
                  *(float(c.get("bits", 16)) for c in classes[:2])]
        if float(classes[2].get("fraction") or 0):
            widths.append(float(classes[2].get("bits", 16)))
    except (TypeError, ValueError, AttributeError):
        return kinds[element]        # a bad width: the element's kind says which and why
    return Bf16Kv.MODE if all(b == 16 for b in widths) else kinds[element]


AnyKvCache = one_of_modes({k.MODE: k for k in KV_KINDS}, _kv_kind, bad=("element", ("int", "fp8", "vq")),
                          order=("preset", "bits", "key_bits", "value_bits", "element", "group_size",
                                 "scale_format", "zero_point", "sinks", "outliers", "recent", "vq", "dequant",
                                 "kernel", "relayout_ops_subbyte", "relayout_ops_byte", "expansion"))


def kv_cache(data: dict | None = None) -> KvCache:
    """A kv_cache block validated from its keys, as a scenario's (tests, what-ifs)."""
    return TypeAdapter(AnyKvCache).validate_python(data or {})
