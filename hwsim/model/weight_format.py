"""Weight storage formats: exact bytes per weight and how a GEMM consumes them.

A tensor class (experts, attention, embeddings and LM head) is stored in one format:
  bf16            2 bytes, the measured baseline
  fp8             1 byte (e4m3) + one fp32 scale per `group_size` block (DeepSeek-V3: 128 x 128
                  blocks) or per tensor (group_size 0); multiplied at the tensor core's FP8 rate
  int4/int3/int2  packed integer codes + a scale and a zero point per `group_size` weights
                  (GPTQ/AWQ), in `scale_format` (bf16/fp16: 2 bytes each)
  mxfp4           OCP MX: e2m1 codes + one e8m0 scale per 32 weights (gpt-oss experts)
  nvfp4           e2m1 codes + one fp8 (e4m3) scale per 16 weights (+ a per-tensor fp32 scale)
`dequant` says who expands them for the MMA:
  native    the tensor core takes the format as is (fp8 on Hopper and Blackwell; fp4 formats
            only on a profile with an `fp4` tensor rate: the b200)
  software  the GEMM expands codes to bf16 in registers: integer ops per weight, the cost
            measured on the H200 (calibration/data/h200_moe_kernels.jsonl, tinygemm int4)
  decoder   a native sub-byte decoder in the load path (what-if profiles with a `decoder:`
            block, the same unit the KV cache uses) expands them on the way into the SM
What each format is (code bits, its scheme's group and scales, the tensor-core input that takes
it) is its type's: hwsim/config/weight_storage.py; the choice of who expands: config/dequant.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwsim.config import dequant as dequant_type, weight_storage
from hwsim.config.scenario import TENSOR_CLASSES, Weights

SCALE_BITS = {"bf16": 16, "fp16": 16, "fp32": 32, "fp8": 8, "e8m0": 8}

# Software dequantization inside a weight-only GEMM on the H200, in integer-lane ops (64 per
# SM per clock). PyTorch's int4 kernel (tinygemm, torch._weight_int4pack_mm, group 128) on
# decode shapes, calibration/data/h200_moe_kernels.jsonl: 4096 x 28672 takes 33.6 / 47.1 /
# 134.6 / 519 / 2059 us at 1 / 4 / 16 / 64 / 256 rows (grid n/8 x ceil(m/16)), ALU-bound from
# 4 rows: expanding every code once per 16-row tile (unpack, convert, scale, zero, repack into
# MMA fragments) plus a cost per weight and row (the m16n8k16 mma.sync issue that shares the
# ALU issue slots); calibration/fit_weight_dequant.py fits both (8 rows, within 5%).
DEQUANT_OPS_PER_WEIGHT = 3.05
DEQUANT_OPS_PER_WEIGHT_ROW = 0.987
DEQUANT_TILE_ROWS = 16
DEQUANT_TILE_N = 8                         # tinygemm: one block per 8 output columns


@dataclass(frozen=True)
class WeightFormat:
    format: str = "bf16"
    group_size: int = 0
    scale_format: str = "bf16"
    dequant: str = "native"
    kernel: object = None      # software: its hwsim.model.dequant_kernels.WeightKernel (None: naive's fit)

    @property
    def stored(self) -> type[weight_storage.StoredFormat]:
        """The stored format as its type (hwsim/config/weight_storage.py)."""
        return weight_storage.of(self.format)

    @property
    def is_bf16(self) -> bool:
        return not self.stored.quantized

    # who expands the codes for the MMA (the module's docstring): each asked here, nowhere else
    @property
    def native(self) -> bool:
        """The tensor core takes the stored format as is."""
        return not dequant_type.of(self.dequant).expands

    @property
    def in_software(self) -> bool:
        return dequant_type.of(self.dequant).on_sm

    @property
    def by_decoder(self) -> bool:
        return dequant_type.of(self.dequant).by_decoder

    @property
    def expanded(self) -> bool:
        """Codes expanded to bf16 before the MMA, in software or by a decoder."""
        return not self.native

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per weight, scales and zero points included."""
        stored = self.stored
        bits = float(stored.code_bits)
        if stored.quantized and self.group_size:
            meta = SCALE_BITS[self.scale_format] * (2 if stored.has_zero else 1)
            bits += meta / self.group_size
        return bits

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8

    def tensor_dtype(self, chip_dtypes) -> str:
        """The tensor-core input type its MMAs run at: the stored format's own where the tensor
        core takes it (fp8; fp4 on a chip that multiplies it), else bf16 (expanded codes)."""
        native_input = self.stored.tensor_input
        return native_input if self.native and native_input in chip_dtypes else "bf16"

    @property
    def kernel_family(self) -> str | None:
        """The dequant kernel family (issue 31): naive or fast in software, native-decoder."""
        if self.by_decoder:
            return "native-decoder"
        return (self.kernel.family if self.kernel is not None else "naive") if self.in_software else None

    def summary(self) -> dict:
        return {"format": self.format, "bits_per_weight": round(self.bits_per_weight, 4),
                "group_size": self.group_size, "scale_format": self.scale_format,
                "dequant": self.dequant}


BF16 = WeightFormat()


def from_config(block, families=None) -> WeightFormat:
    """A WeightFormat from a scenario's weights.<class> block (hwsim.config.scenario.TensorWeights);
    a software one costed by its kernel family of `families` (hwsim.model.dequant_kernels; None:
    the naive fit)."""
    fmt = block.format
    stored = weight_storage.of(fmt)
    group = block.group_size if block.group_size is not None else stored.default_group
    scale = block.scale_format or stored.default_scale
    dequant = block.dequant_choice
    costs = None
    if dequant_type.of(dequant).on_sm and families is not None:
        costs = families.weights[block.kernel or families.default("weights")]
    return WeightFormat(fmt, group, scale, dequant, costs)


@dataclass(frozen=True)
class WeightPlan:
    """The format of each tensor class of one model in one scenario."""

    experts: WeightFormat = BF16
    attention: WeightFormat = BF16
    embeddings: WeightFormat = BF16

    def of(self, cls: str) -> WeightFormat:
        return getattr(self, cls)

def plan(cfg_weights, model_defaults: dict | None = None, families=None) -> WeightPlan:
    """The scenario's `weights:` block over the model's default formats (DeepSeek-V3: FP8), each
    software class costed by its kernel family of `families` (None: the naive fit)."""
    out = {}
    for cls in TENSOR_CLASSES:
        block = (cfg_weights or Weights()).resolved(cls, model_defaults)
        out[cls] = from_config(block, families) if block is not None else BF16
    return WeightPlan(**out)


def decoder_takes(formats, fmt: str) -> bool:
    """Whether a decoder listing `formats` expands weights stored in `fmt` (its int4 path takes
    the 4-bit float formats too)."""
    return weight_storage.of(fmt).decoded_by(formats)


def problems(p: WeightPlan, profile) -> list[tuple[str, str]]:
    """(key, message) for formats the profile cannot run the way asked."""
    out = []
    dtypes = set(profile.sm.tensor_tflops)
    for cls in TENSOR_CLASSES:
        f = p.of(cls)
        key = f"weights.{cls}"
        if f.by_decoder:
            if profile.decoder is None:
                out.append((f"{key}.dequant", f"profile '{profile.name}' has no native sub-byte decoder "
                                              f"(no decoder: block); use dequant: software or a what-if "
                                              f"profile with a decoder (h200-decoder)"))
            elif not decoder_takes(profile.decoder.formats, f.format):
                out.append((f"{key}.format", f"the decoder of '{profile.name}' supports {profile.decoder.formats}"))
        if f.native:
            out += [(f"{key}.dequant", problem) for problem in _native_problems(f, profile, dtypes)]
    return out


def _native_problems(f: WeightFormat, profile, dtypes: set[str]) -> list[str]:
    """Why the tensor cores of `profile` cannot take `f` as stored (dequant native), if they cannot."""
    native_input = f.stored.tensor_input
    if not f.stored.quantized:                 # the baseline every profile's rates are of
        return []
    if native_input is None:
        return [f"no tensor core multiplies {f.format} weights natively: use dequant: software or decoder"]
    if native_input not in dtypes:
        hint = f": {f.format} {f.stored.no_rate_hint}" if f.stored.no_rate_hint else ""
        return [f"profile '{profile.name}' has no {native_input.upper()} tensor rate{hint}"]
    return []
