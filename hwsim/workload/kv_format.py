"""KV-cache storage formats: bytes per token and the ALU work to dequantize them.

A cached token belongs to one class: attention sink (the first `sinks.tokens`), outlier (a
fraction of the rest), recent window (the last `recent.tokens`), or routine (everything
else, at `key_bits`/`value_bits`). Each class is stored at its own width. Quantized classes
also carry one scale (and optionally one zero point) per group of `group_size` elements, and
outlier tokens carry an int32 index per head. All of it is counted in the bytes.

Software dequantization cost per element, in int32-lane operations (Hopper: 64 lanes per
SM per clock; docs/kv_cache.md derives each term):
  unpack  shift + mask of a packed sub-byte code                    2   (sub-byte ints)
  i2f     integer code -> fp32 (16 conversions/clk/SM = 4 lanes)     4   (ints)
  fma     code * scale + zero (fp32 FMA, 128/clk = half a lane)     0.5 (ints)
  f2h     fp32 -> fp16 MMA operand (16/clk/SM)                      4   (ints, fp8 pairs: 2)
  relayout  packed order -> MMA fragment order via shared memory   calibrated per kernel family
  vq      one shared-memory codebook lookup per code (dims elements) 2 / dims
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

UNPACK_OPS = 2.0
I2F_OPS = 4.0
FMA_OPS = 0.5
F2H_OPS = 4.0
FP8_CVT_OPS = 2.0          # cvt.f16x2.e4m3x2 converts two elements per instruction
SMEM_LOOKUP_OPS = 2.0      # one shared-memory codebook load per code: 32 per clk per SM = half a lane
INDEX_BYTES = 4            # int32 token index per outlier token and head
SCALE_BYTES = {"fp16": 2, "fp8": 1, "pow2": 1}


class Codes:
    """How codes of one element kind are stored and expanded (issue 42: the kind is a type, each
    its behaviour): a scale (and zero point) per group or not, the ALU ops to expand one
    element, a codebook or not."""
    scaled: ClassVar[bool] = True

    def full_width_ops(self, fmt: "KvFormat") -> float:
        """A class stored at 16 bits is read as is: nothing to expand."""
        return 0.0

    def ops(self, fmt: "KvFormat", bits: float) -> float:
        raise NotImplementedError

    def codebook_bytes(self, fmt: "KvFormat") -> int:
        return 0


class IntCodes(Codes):
    """Uniform integer codes: unpack, convert, scale (+ zero), relayout into MMA fragments."""

    def full_width_ops(self, fmt):
        """A family counted per width charges its loop over bf16 too."""
        return dict(fmt.kernel_ops_by_bits).get(16.0, 0.0)

    def ops(self, fmt, bits):
        if fmt.kernel_ops_by_bits:
            return next((ops for width, ops in fmt.kernel_ops_by_bits if width >= bits), fmt.kernel_ops_by_bits[-1][1])
        ops = I2F_OPS + FMA_OPS + F2H_OPS
        return ops + ((UNPACK_OPS + fmt.relayout_ops_subbyte) if bits < 8 else fmt.relayout_ops_byte)


class Fp8Codes(Codes):
    """e4m3 codes: no scales, one conversion instruction per pair of elements."""
    scaled = False

    def ops(self, fmt, bits):
        return FP8_CVT_OPS


class VqCodes(Codes):
    """Vector codes: fp16 codebook entries in shared memory, a lookup per code, no conversion."""

    def ops(self, fmt, bits):
        return SMEM_LOOKUP_OPS / max(fmt.vq_dims, 1)

    def codebook_bytes(self, fmt):
        return fmt.vq_entries * fmt.vq_dims * 2


CODES: dict[str, Codes] = {"int": IntCodes(), "fp8": Fp8Codes(), "vq": VqCodes()}


@dataclass(frozen=True)
class ClassWidth:
    """Storage of one token class: bits per K and V element."""

    key_bits: float
    value_bits: float


@dataclass(frozen=True)
class KvFormat:
    routine: ClassWidth
    sinks: int
    sink_bits: float
    outlier_fraction: float
    outlier_bits: float
    recent: int
    recent_bits: float
    group_size: int
    scale_format: str
    zero_point: bool
    element: str                 # "int" (uniform integer codes), "fp8" or "vq": a kind of CODES
    vq_entries: int = 0
    vq_dims: int = 0
    relayout_ops_subbyte: float = 0.0
    relayout_ops_byte: float = 0.0
    # a kernel family costed per stored width instead (hwsim.model.dequant_kernels: `fast`):
    # (bits, ops per element) ascending; a width between two takes the wider one's
    kernel_ops_by_bits: tuple[tuple[float, float], ...] = ()
    expansion: str = "one-pass"  # dequant unfused: one expansion kernel, or "hqq": HQQ's chain (hqq_dequant.py)

    @property
    def codes(self) -> Codes:
        return CODES[self.element]

    # -- bytes ---------------------------------------------------------------------------
    def _meta_bits(self, bits: float) -> float:
        """Scale/zero bits per element for a class stored at `bits` (none at 16 or for fp8)."""
        if bits >= 16 or not self.codes.scaled:
            return 0.0
        per_group = SCALE_BYTES[self.scale_format] * (2 if self.zero_point else 1) * 8
        return per_group / self.group_size

    def _class_bits(self, bits: float) -> float:
        return bits + self._meta_bits(bits)

    def token_fractions(self, context: int) -> dict[str, float]:
        """Share of the cached tokens in each class at this context length."""
        context = max(context, 1)
        sinks = min(self.sinks, context) / context
        recent = min(self.recent, max(context - self.sinks, 0)) / context
        rest = max(0.0, 1.0 - sinks - recent)
        outliers = rest * self.outlier_fraction
        return {"sinks": sinks, "recent": recent, "outliers": outliers, "routine": rest - outliers}

    def bits_per_element(self, context: int) -> float:
        """Average stored bits per cached K/V element, metadata and outlier indices included."""
        f = self.token_fractions(context)
        routine = (self._class_bits(self.routine.key_bits) + self._class_bits(self.routine.value_bits)) / 2
        bits = (f["sinks"] * self._class_bits(self.sink_bits)
                + f["recent"] * self._class_bits(self.recent_bits)
                + f["outliers"] * self._class_bits(self.outlier_bits)
                + f["routine"] * routine)
        return bits

    def index_bytes_per_token_head(self, context: int) -> float:
        return self.token_fractions(context)["outliers"] * INDEX_BYTES

    def bytes_per_token(self, elements_per_token: int, heads: int, context: int) -> float:
        """Stored bytes of one token's K and V in one layer (elements_per_token = 2 x kv_heads x head_dim)."""
        return (elements_per_token * self.bits_per_element(context) / 8
                + heads * self.index_bytes_per_token_head(context))

    @property
    def is_unquantized(self) -> bool:
        """Every token stored at 16 bits: a class with no tokens (no sinks, no recent window, no
        outliers) stores nothing, whatever width it names."""
        return (self.routine.key_bits >= 16 and self.routine.value_bits >= 16
                and (self.sinks == 0 or self.sink_bits >= 16) and (self.recent == 0 or self.recent_bits >= 16)
                and (self.outlier_fraction == 0 or self.outlier_bits >= 16))

    # -- dequantization work -------------------------------------------------------------
    def _ops(self, bits: float) -> float:
        return self.codes.full_width_ops(self) if bits >= 16 else self.codes.ops(self, bits)

    def dequant_ops_per_element(self, context: int) -> float:
        """Average software-dequant ALU ops (int32-lane equivalents) per cached element read."""
        f = self.token_fractions(context)
        routine = (self._ops(self.routine.key_bits) + self._ops(self.routine.value_bits)) / 2
        return (f["sinks"] * self._ops(self.sink_bits) + f["recent"] * self._ops(self.recent_bits)
                + f["outliers"] * self._ops(self.outlier_bits) + f["routine"] * routine)

    def quantized_fraction(self, context: int) -> float:
        """Share of cached elements stored below 16 bits (what a decoder must expand)."""
        f = self.token_fractions(context)
        share = 0.0
        for cls, bits in (("sinks", self.sink_bits), ("recent", self.recent_bits),
                          ("outliers", self.outlier_bits)):
            share += f[cls] if bits < 16 else 0.0
        routine_q = ((self.routine.key_bits < 16) + (self.routine.value_bits < 16)) / 2
        return share + f["routine"] * routine_q

    def append_bits(self) -> float:
        """Stored bits per element of the token appended this step (recent window, else routine)."""
        if self.recent:
            return self._class_bits(self.recent_bits)
        return (self._class_bits(self.routine.key_bits) + self._class_bits(self.routine.value_bits)) / 2

    def codebook_bytes(self) -> int:
        return self.codes.codebook_bytes(self)


def max_context_fitting(free_bytes: float, batch: int, layers: int, elements_per_token: int,
                        heads: int, fmt: KvFormat) -> int:
    """Largest context per sequence whose KV cache fits in `free_bytes` (bisection on length)."""
    if free_bytes <= 0:
        return 0
    lo, hi = 0, 1
    per = lambda n: batch * layers * n * fmt.bytes_per_token(elements_per_token, heads, n)  # noqa: E731
    while per(hi) <= free_bytes and hi < 1 << 30:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if per(mid) <= free_bytes else (lo, mid)
    return lo if not math.isinf(free_bytes) else 1 << 30


def from_config(kv, kernel=None) -> KvFormat:
    """KvFormat from a validated `kv_cache` scenario block (hwsim.config.scenario.KvCache: one
    kind, the keys it lacks at their defaults), its software dequant costed by `kernel` (a
    hwsim.model.dequant_kernels.KvKernel; None: the block's relayout keys, the naive fit). The
    block's relayout keys, set to other than their default (the H200 fit), override the naive
    family's (a value, not whether it was written: sweeps and what-ifs re-validate whole scenarios)."""
    keys = kv.every_key()
    costs = {k: keys[k] for k in ("relayout_ops_subbyte", "relayout_ops_byte")}
    if kernel is not None:
        costs = {k: v if v != kv.BAG[k] else getattr(kernel, k) for k, v in costs.items()}
        costs["kernel_ops_by_bits"] = kernel.ops_by_bits
    return KvFormat(
        routine=ClassWidth(*kv.widths()[:2]),
        sinks=kv.sinks.tokens, sink_bits=kv.sinks.bits,
        outlier_fraction=kv.outliers.fraction, outlier_bits=kv.outliers.bits,
        recent=kv.recent.tokens, recent_bits=kv.recent.bits,
        group_size=keys["group_size"], scale_format=keys["scale_format"], zero_point=keys["zero_point"],
        element=keys["element"], vq_entries=keys["vq"].entries, vq_dims=keys["vq"].dims,
        expansion=keys["expansion"], **costs,
    )


BF16_KV = KvFormat(routine=ClassWidth(16, 16), sinks=0, sink_bits=16, outlier_fraction=0.0,
                   outlier_bits=16, recent=0, recent_bits=16, group_size=128, scale_format="fp16",
                   zero_point=True, element="int")
