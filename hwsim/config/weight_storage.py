"""How a tensor class's weights are stored: the `weights.format` choice as a type (issue 42),
one class per format, what it is in class attributes (as config/dequant.py does for who expands
the codes), so the weight formats, the schedule and the checks ask the format instead of
comparing its name. docs/weights.md; the bytes: hwsim/model/weight_format.py.

  bf16            2 bytes, the measured baseline
  fp8             1 byte (e4m3) + one fp32 scale per `group_size` block or per tensor (group 0)
  int4/int3/int2  packed integer codes + a scale and a zero point per group (GPTQ/AWQ: 128)
  mxfp4           OCP MX: e2m1 codes + one e8m0 scale per 32 weights
  nvfp4           e2m1 codes + one fp8 (e4m3) scale per 16 weights
"""

from __future__ import annotations

from typing import ClassVar, Literal


class StoredFormat:
    name: ClassVar[str]
    code_bits: ClassVar[int]
    default_group: ClassVar[int]           # weights per scale, the scheme's own block (0: per tensor)
    default_scale: ClassVar[str]           # the scales' format
    quantized: ClassVar[bool] = True       # codes with scales, not the bf16 baseline
    has_zero: ClassVar[bool] = False       # asymmetric codes carry a zero point beside each scale
    tensor_input: ClassVar[str | None] = None   # the tensor cores' input type that takes it as
    # stored (None: no tensor core multiplies it; it is expanded in software or by a decoder)
    native_unless_told: ClassVar[bool] = False  # dequant unset: the tensor core takes it (else software)
    decoder_paths: ClassVar[tuple[str, ...]] = ()   # a decoder's formats any of which expands it
    no_rate_hint: ClassVar[str] = ""       # said when asked native on a chip without its tensor rate

    @classmethod
    def decoded_by(cls, formats) -> bool:
        """Whether a decoder listing `formats` expands weights stored in this format."""
        return any(p in formats for p in (cls.name, *cls.decoder_paths))


class Bf16(StoredFormat):
    name, code_bits, default_group, default_scale = "bf16", 16, 0, "bf16"
    quantized, tensor_input, native_unless_told = False, "bf16", True


class Fp8(StoredFormat):
    name, code_bits, default_group, default_scale = "fp8", 8, 0, "fp32"
    tensor_input, native_unless_told = "fp8", True


class _Int(StoredFormat):
    default_group, default_scale, has_zero = 128, "bf16", True


class Int4(_Int):
    name, code_bits = "int4", 4


class Int3(_Int):
    name, code_bits = "int3", 3


class Int2(_Int):
    name, code_bits = "int2", 2


class _Fp4(StoredFormat):
    code_bits, tensor_input = 4, "fp4"
    decoder_paths = ("int4",)              # a decoder's int4 path takes the 4-bit float formats too
    no_rate_hint = "needs dequant: software (or decoder on a what-if chip)"


class Mxfp4(_Fp4):
    name, default_group, default_scale = "mxfp4", 32, "e8m0"


class Nvfp4(_Fp4):
    name, default_group, default_scale = "nvfp4", 16, "fp8"


FORMATS: dict[str, type[StoredFormat]] = {c.name: c for c in (Bf16, Fp8, Int4, Int3, Int2, Mxfp4, Nvfp4)}

WeightFormatName = Literal[tuple(FORMATS)]      # the schema's choices, from the formats


def of(name: str) -> type[StoredFormat]:
    """The type of a validated `format` choice (the schema's Literal names one of FORMATS)."""
    return FORMATS[name]
