"""Dequantization kernel families (issue 31): who expands sub-byte KV codes and weights, and at
what ALU cost, named so a run can ask for one (`kv_cache.kernel`, `weights.<class>.kernel`).

- `naive`: the kernels hwsim is calibrated on, measured on an H200: the fused Triton low-bit
  attention of shared/calibration (calibration/fit_kv_dequant.py) and tinygemm
  (calibration/fit_weight_dequant.py);
- `fast`: calibration/fast_kv_attn.py and fast_w4a16.py, their lane-op counts fitted to an
  H100's timings (issue 44, calibration/fit_fast_kernels.py; validation/fast_kernels_measured.md);
- `native-decoder`: the what-if decoder in the load path (the profile's `decoder:` block).

The numbers live in the profile's `dequant_kernels:` block (hwsim/config/dequant_kernels.py),
so a what-if chip can differ; a profile without one gets NAIVE, the H200's fit, as before. The
default family is the fastest measured one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hwsim.config import dequant as dequant_type
from hwsim.config.kernel_checks import FAMILIES, SOFTWARE
from hwsim.config.scenario import IntKv
from hwsim.model.weight_format import DEQUANT_OPS_PER_WEIGHT, DEQUANT_OPS_PER_WEIGHT_ROW, DEQUANT_TILE_ROWS
from hwsim.workload.kv_format import BF16_KV, ClassWidth

FAST_TILE_ROWS = (16, 64)          # the padded batch rows fast_w4a16's SASS was counted at
FAST_KV_BITS = (2, 4, 8, 16)       # the widths fast_kv_attn's SASS was counted at
KV_SPEED_BITS = 2                  # "fastest" compares the families at 2-bit codes
# ... and weight families at one row a GEMM: MoE decode's regime, where tinygemm (naive) is measured
# faster than the fast W4A16 kernel (issue 44, H100: 0.57x its time at 1 row, 0.74x at 4; the fast
# kernel wins from 16 rows, where a scenario names it)
WEIGHT_SPEED_ROWS = 1


@dataclass(frozen=True)
class KvKernel:
    """Software dequant cost of one family over KV codes: naive charges kv_format.py's terms
    with its relayout; fast its loop's counted ops per element, by stored width."""

    family: str
    measured: bool
    relayout_ops_subbyte: float = 0.0
    relayout_ops_byte: float = 0.0
    ops_by_bits: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class WeightKernel:
    """Software dequant cost of one family inside a weight-only GEMM, per weight."""

    family: str
    measured: bool
    ops_per_weight: float              # naive: per 16-row tile; fast: at 16 padded rows
    ops_per_weight_row: float          # naive: per row of the tile; fast: per padded row past 16

    def ops(self, rows: int) -> float:
        """Int-lane ops per weight for a tile of `rows` token rows."""
        if not dequant_type.family(self.family).counted:     # naive: per 16-row tile, per row of it
            return self.ops_per_weight + self.ops_per_weight_row * min(rows, DEQUANT_TILE_ROWS)
        return self.ops_per_weight + self.ops_per_weight_row * (fast_tile_rows(rows) - FAST_TILE_ROWS[0])


def fast_tile_rows(rows: int) -> int:
    """The fast W4A16 kernel's M tile: the batch padded to a power of two, 16 to 64 rows."""
    return min(FAST_TILE_ROWS[1], max(FAST_TILE_ROWS[0], 1 << (max(rows, 1) - 1).bit_length()))


# the fit (calibration/data/fit_kv_dequant.txt) is the kv_cache.relayout_ops_* keys' defaults
NAIVE_KV = KvKernel("naive", True, *(IntKv.model_fields[f"relayout_ops_{c}"].default for c in ("subbyte", "byte")))
NAIVE_WEIGHTS = WeightKernel("naive", True, DEQUANT_OPS_PER_WEIGHT, DEQUANT_OPS_PER_WEIGHT_ROW)


@dataclass(frozen=True)
class Families:
    """The kernel families one chip offers, software ones with their costs."""

    kv: dict[str, KvKernel]
    weights: dict[str, WeightKernel]
    decoder: bool

    def available(self, part: str) -> tuple[str, ...]:
        own = self.kv if part == "kv" else self.weights
        return tuple(f for f in FAMILIES if f in own or (f == "native-decoder" and self.decoder))

    def default(self, part: str) -> str:
        """The fastest measured software family (naive while fast is unmeasured)."""
        if part == "kv":
            cost = {f: kv_ops(k, KV_SPEED_BITS) for f, k in self.kv.items() if k.measured}
        else:
            cost = {f: w.ops(WEIGHT_SPEED_ROWS) for f, w in self.weights.items() if w.measured}
        return min(cost, key=cost.get)



def kv_ops(k: KvKernel, bits: float) -> float:
    """Ops per element a family charges for integer codes of `bits` (hwsim.workload.kv_format)."""
    fmt = replace(BF16_KV, routine=ClassWidth(bits, bits), relayout_ops_subbyte=k.relayout_ops_subbyte,
                  relayout_ops_byte=k.relayout_ops_byte, kernel_ops_by_bits=k.ops_by_bits)
    return fmt.dequant_ops_per_element(1 << 20)


def from_profile(profile) -> Families:
    """The families of a HardwareProfile (hwsim.config.profile)."""
    block = profile.dequant_kernels
    kv, weights = {"naive": NAIVE_KV}, {"naive": NAIVE_WEIGHTS}
    if block is not None:
        n = block.kv.naive
        kv["naive"] = KvKernel("naive", n.measured, n.relayout_ops_subbyte.value, n.relayout_ops_byte.value)
        w = block.weights.naive
        weights["naive"] = WeightKernel("naive", w.measured, w.ops_per_weight.value, w.ops_per_weight_row.value)
        if (f := block.kv.fast) is not None:
            kv["fast"] = KvKernel("fast", f.measured, ops_by_bits=tuple(
                (float(b), getattr(f, f"ops_per_element_{b}bit").value) for b in FAST_KV_BITS))
        if (f := block.weights.fast) is not None:
            lo, hi = f.ops_per_weight_16_rows.value, f.ops_per_weight_64_rows.value
            weights["fast"] = WeightKernel("fast", f.measured, lo, (hi - lo) / (FAST_TILE_ROWS[1] - FAST_TILE_ROWS[0]))
    return Families(kv, weights, profile.decoder is not None)


def basis(families: Families, family: str) -> str:
    """How a family's cost is known: measured (fitted to timings), predicted (from machine code)
    or what-if (the decoder: assumed silicon)."""
    if family == "native-decoder":
        return "what-if"
    return "measured" if (families.kv.get(family) or families.weights[family]).measured else "predicted"


def unmeasured_note(part_key: str, family: str) -> str:
    """The warning a run using an unmeasured software family carries."""
    return (f"{part_key} {family}: its dequant cost is PREDICTED from the kernel's machine code "
            f"(SASS instruction counts, calibration/fast_sass.py, calibration/data/fast_kernels_sass.txt), "
            f"not measured; docs/kv_cache.md and docs/weights.md say how far to trust it")


def decoder_takes(formats: tuple[str, ...] | list[str], element: str) -> bool:
    """Whether a decoder listing `formats` expands KV codes of this element kind (int, fp8, vq)."""
    return element in " ".join(formats)


def kv_family(cfg_kv, families: Families) -> str | None:
    """The family that reads this KV cache (None: a bf16 cache, read by no dequant kernel)."""
    if not cfg_kv.quantized:
        return None
    dequant = dequant_type.of(cfg_kv.dequant)
    if dequant.by_decoder:
        return "native-decoder"
    if cfg_kv.kernel is None and not dequant.fused:
        return "naive"          # fast is one fused kernel (software only): an expansion pass is naive's
    return cfg_kv.kernel or families.default("kv")


def kv_kernel(cfg_kv, families: Families) -> KvKernel | None:
    """The software family costing this cache's dequant (None under the decoder)."""
    family = kv_family(cfg_kv, families) or families.default("kv")
    return families.kv.get(family)


def kv_variants(cfg_kv, families: Families, decoder_formats) -> dict:
    """This cache read by each family: family -> (KvFormat, dequant), None where the chip has no
    such family (no fast counts in its profile, no decoder, or one that does not take its codes)."""
    from hwsim.workload.kv_format import from_config
    out = {}
    for family in FAMILIES:
        if family == "native-decoder":
            fmt = from_config(cfg_kv)
            out[family] = (fmt, "decoder") if families.decoder and decoder_takes(decoder_formats, fmt.element) else None
        else:
            k = families.kv.get(family)
            out[family] = (from_config(cfg_kv, k), "software") if k else None
    return out


def unmeasured_notes(cfg, schedule, families: Families) -> list[str]:
    """A warning for each part of the run costed by a family that is predicted, not measured."""
    notes = []
    family = kv_family(cfg.kv_cache, families)
    if family in SOFTWARE and schedule.kv_dequant.expands and not families.kv[family].measured:
        notes.append(unmeasured_note("kv_cache.kernel", family))
    for cls in ("experts", "attention", "embeddings"):
        fmt = schedule.wplan.of(cls)
        if fmt.kernel is not None and not fmt.kernel.measured:
            notes.append(unmeasured_note(f"weights.{cls}.kernel", fmt.kernel.family))
    return notes


LABEL = {"naive": "the naive kernel", "fast": "the fast kernel", "native-decoder": "a native decoder"}
KERNEL_LABEL = {"gemlite": "gemlite's kernel"}      # a family's figure from a kernel not its own (issue 44)
ESTIMATED = {"predicted": "estimated: predicted, unmeasured", "what-if": "estimated: what-if silicon",
             "h100-fitted": "estimated: costs fitted on an H100"}


def label(family: str, kernels: dict | None) -> str:
    return KERNEL_LABEL.get((kernels or {}).get(family), LABEL[family])


def verdicts(by: dict | None, basis: dict, kernels: dict | None = None) -> dict | None:
    """The three verdicts a run reports for sub-byte KV or weights (issue 44): the naive kernel's,
    the best measured family's and the native decoder's, each a speedup over bf16 with its family
    and whether it is measured (else estimated); None where no family gives one (a bf16 cache,
    native FP8 weights). `by`: family -> speedup or None; `basis`: family -> basis(); `kernels`
    (weights): family -> the kernel its figure came from, added to each verdict as `kernel`."""
    got = {f: v for f, v in (by or {}).items() if f in FAMILIES and v is not None}
    if not got:
        return None
    named = lambda f: {"kernel": kernels[f]} if kernels else {}  # noqa: E731
    entry = lambda f: ({"family": f, **named(f), "speedup": got[f], "measured": basis.get(f) == "measured"}  # noqa: E731
                       if f in got else None)
    measured = [f for f in got if basis.get(f) == "measured"]
    best = max(measured, key=got.get) if measured else None
    return {"naive": entry("naive"), "best_measured": entry(best) if best else None,
            "native_decoder": entry("native-decoder")}


def spread_line(what: str, by: dict | None, basis: dict, kernels: dict | None = None) -> str | None:
    """One line of a run's report: the naive, best-measured and native-decoder verdicts (speedups
    over bf16), each marked measured or estimated, then any other family the chip offers (the
    fast kernel while it is predicted). `by`: family -> speedup or None; `basis`: family -> how
    it is known (basis()); `kernels`: family -> the kernel its figure came from (weights)."""
    v = verdicts(by, basis, kernels)
    if v is None:
        return None
    mark = lambda f: "measured" if basis.get(f) == "measured" else ESTIMATED[basis[f]]  # noqa: E731
    said = lambda e: f"{e['speedup']:.2f}x ({mark(e['family'])})"  # noqa: E731
    naive = f"naive kernel {said(v['naive'])}" if v["naive"] else "naive kernel: none"
    best = (f"best measured {v['best_measured']['speedup']:.2f}x ({label(v['best_measured']['family'], kernels)})"
            if v["best_measured"] else "best measured: none")
    decoder = f"native decoder {said(v['native_decoder'])}" if v["native_decoder"] else "native decoder: none on this chip"
    others = [f"{label(f, kernels)} {by[f]:.2f}x ({mark(f)})" for f in FAMILIES
              if f not in ("naive", "native-decoder") and (by or {}).get(f) is not None]
    return f"{what} over bf16: " + "; ".join([naive, best, decoder] + (["also " + ", ".join(others)] if others else []))
