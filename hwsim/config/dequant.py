"""Who expands stored codes (a quantized KV cache's, a weight class's) for the MMA: the
`dequant` choice as a type (issue 42), one class per choice, its behaviour in class attributes
(SimPy's variation by class attribute), so the schedule, the weight formats, the kernel
families and the checks ask the choice what it does instead of comparing its name.

  native    the tensor core takes the stored format as is (weights: fp8; fp4 on a chip with an fp4 rate)
  software  the SM's ALUs unpack the codes in registers, inside the consuming kernel
  decoder   a native sub-byte decoder in the load path (a what-if profile's `decoder:` block)
  unfused   (KV) an expansion pass writes bf16 to HBM first; the attention then reads bf16
  none      (KV) a bf16 cache: nothing to expand
"""

from __future__ import annotations

from typing import ClassVar


class Dequant:
    name: ClassVar[str]
    expands: ClassVar[bool] = True      # codes are expanded to bf16 before the MMA
    on_sm: ClassVar[bool] = False       # ... by the SM's ALUs (software or an expansion pass)
    by_decoder: ClassVar[bool] = False  # ... by the profile's load-path decoder
    fused: ClassVar[bool] = True        # ... inside the kernel that consumes them


class Native(Dequant):
    name, expands = "native", False


class Software(Dequant):
    name, on_sm = "software", True


class Decoder(Dequant):
    name, by_decoder = "decoder", True


class Unfused(Dequant):
    name, on_sm, fused = "unfused", True, False


class NoDequant(Dequant):
    name, expands = "none", False


CHOICES: dict[str, type[Dequant]] = {c.name: c for c in (Native, Software, Decoder, Unfused, NoDequant)}


def of(name: str) -> type[Dequant]:
    """The type of a validated `dequant` choice (the schema's Literal names one of CHOICES)."""
    return CHOICES[name]
