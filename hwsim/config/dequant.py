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

from typing import ClassVar, Literal


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


class KernelFamily:
    """A dequant kernel design (`kv_cache.kernel`, `weights.<class>.kernel`; hwsim.model.dequant_kernels
    holds their costs), one class per family."""
    name: ClassVar[str]
    is_dequant: ClassVar[str | None] = None     # the dequant choice this family is (else a software kernel)
    kv_ways: ClassVar[tuple[str, ...]] = ("software", "unfused")   # the KV dequant choices it runs under
    counted: ClassVar[bool] = False             # its lane ops counted from its machine code, by stored
    # width (KV) and padded tile rows (weights), rather than the naive kernels' measured fit


class Naive(KernelFamily):
    name = "naive"


class Fast(KernelFamily):
    name, kv_ways, counted = "fast", ("software",), True     # one fused kernel: no expansion pass


class NativeDecoder(KernelFamily):
    name, is_dequant, kv_ways = "native-decoder", "decoder", ("decoder",)


KERNEL_FAMILIES: dict[str, type[KernelFamily]] = {c.name: c for c in (Naive, Fast, NativeDecoder)}


def family(name: str | None) -> type[KernelFamily] | None:
    """The type of a validated kernel family choice (None: unset, the profile's default)."""
    return None if name is None else KERNEL_FAMILIES[name]


KernelFamilyName = Literal[tuple(KERNEL_FAMILIES)]      # the schema's choices, from the families


def kernel_dequant(kernel: str | None, dequant: str | None, software: tuple[str, ...] | None = None) -> str | None:
    """The dequant a kernel family implies (docs/kv_cache.md, docs/weights.md): native-decoder is
    dequant decoder; naive and fast are software kernels, run the `software` ways (None: the
    family's KV ways). `dequant`: the key as set (None: unset). A contradiction is a ValueError."""
    fam = family(kernel)
    if fam is not None and fam.is_dequant is not None:
        if dequant not in (None, fam.is_dequant):
            raise ValueError(f"kernel {kernel} is dequant {fam.is_dequant}, not {dequant}: set one of the two")
        return fam.is_dequant
    software = software or (fam.kv_ways if fam is not None else ())
    if kernel is not None and dequant is not None and dequant not in software:
        raise ValueError(f"kernel {kernel} runs with dequant {' or '.join(software)}, not {dequant} "
                         f"(the decoder is kernel native-decoder): drop one of the two keys")
    return dequant
