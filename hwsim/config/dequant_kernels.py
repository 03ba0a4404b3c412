"""Profile schema of the `dequant_kernels:` block: the software dequantization cost of each
kernel family on this chip, every number with its source (docs/kv_cache.md, docs/weights.md).

A family is one kernel design: `naive` the kernels hwsim was calibrated on (the fused Triton
low-bit attention of shared/calibration, tinygemm for weights), `fast` the kernels of
calibration/fast_*.py. `measured: false` marks a family whose numbers are predicted (from its
machine code) rather than fitted to timings; a run using one says so. The third family,
`native-decoder`, is the profile's `decoder:` block. hwsim.model.dequant_kernels reads this.
"""

from __future__ import annotations

from pydantic import Field

from hwsim.config.sourced import Positive
from hwsim.config.strict import Strict


class NaiveKvKernel(Strict):
    measured: bool
    relayout_ops_subbyte: Positive = Field(description="int-lane ops per element moving packed sub-byte "
                                                       "codes into MMA fragment order")
    relayout_ops_byte: Positive = Field(description="the same for 8-bit codes")


class FastKvKernel(Strict):
    """Int-lane ops per cached K or V element of the kernel's main loop, by stored width (a
    width between two takes the wider one's: 1.5 bits the 2-bit count, 3 the 4-bit one)."""

    measured: bool
    ops_per_element_2bit: Positive
    ops_per_element_4bit: Positive
    ops_per_element_8bit: Positive
    ops_per_element_16bit: Positive = Field(description="the same loop over bf16 tokens (a recent window)")


class NaiveWeightKernel(Strict):
    measured: bool
    ops_per_weight: Positive = Field(description="int-lane ops per weight, once per 16-row tile")
    ops_per_weight_row: Positive = Field(description="int-lane ops per weight and row of the tile")


class FastWeightKernel(Strict):
    measured: bool
    ops_per_weight_16_rows: Positive = Field(description="int-lane ops per weight at 16 padded rows")
    ops_per_weight_64_rows: Positive = Field(description="int-lane ops per weight at 64 padded rows")


class KvKernels(Strict):
    naive: NaiveKvKernel
    fast: FastKvKernel | None = None


class WeightKernels(Strict):
    naive: NaiveWeightKernel
    fast: FastWeightKernel | None = None


class DequantKernels(Strict):
    kv: KvKernels
    weights: WeightKernels
