"""Whether a scenario's dequant choices exist on its profile, from the schema alone: the decoder
that dequant decoder needs and the codes it takes, and the kernel families the scenario names
(the profile's `dequant_kernels:` block, hwsim/config/dequant_kernels.py). hwsim.config.load's
cross checks yield them, each at its key."""

from __future__ import annotations

from hwsim.config import dequant as dequant_type
from hwsim.config.scenario import TENSOR_CLASSES

FAMILIES = ("naive", "fast", "native-decoder")      # the dequant kernel families (hwsim.model.dequant_kernels)
SOFTWARE = ("naive", "fast")


def offered(profile, part: str) -> tuple[str, ...]:
    """The kernel families a profile offers for `part` (kv or weights): naive always (the H200's
    fit where it has no dequant_kernels block), fast where its block counts one, the decoder
    where it has one."""
    block = profile.dequant_kernels
    fast = block is not None and getattr(block, part).fast is not None
    return ("naive",) + (("fast",) if fast else ()) + (("native-decoder",) if profile.decoder else ())


def kernel_problems(cfg, profile):
    """(key, message) for a dequant the profile cannot run: no decoder, a decoder that does not
    take the cache's codes, a software family its block does not list."""
    kv = cfg.kv_cache
    by_decoder = dequant_type.of(kv.dequant).by_decoder
    if by_decoder and profile.decoder is None:
        yield "kv_cache.dequant", f"profile '{profile.name}' has no native sub-byte decoder (no decoder: block)"
    elif by_decoder and kv.quantized and kv.ELEMENT not in " ".join(profile.decoder.formats):
        yield "kv_cache.element", f"the decoder of '{profile.name}' supports {profile.decoder.formats}"
    wanted = [("kv_cache.kernel", "kv", kv.kernel if kv.quantized else None)]
    wanted += [(f"weights.{c}.kernel", "weights", getattr(cfg.weights, c).kernel) for c in TENSOR_CLASSES]
    for key, part, family in wanted:
        has = offered(profile, part)
        if family in SOFTWARE and family not in has:
            yield key, (f"profile '{profile.name}' has no '{family}' kernel family for {part} "
                        f"(its dequant_kernels block lists none); it has {', '.join(has)}")
