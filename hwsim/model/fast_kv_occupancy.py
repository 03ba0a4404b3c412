"""The fast KV kernel's program as compiled (calibration/fast_kv_attn.py; issue 44): its shared
memory, registers and threads by the widths of its three segment slots and its token block.
They set how many programs an SM holds at once (hwsim/hw/occupancy.py), and so how far the
programs' latency-bound loops overlap (Kernel.chain_ops): measured on an H100, any 16-bit slot,
even an empty one, holds the SM to one program (128 KiB of shared memory), adaptive-2's
all-sub-byte slots let two run (188 registers), and the time follows (0.62-0.73x fast2's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

THREADS = 128                    # 4 warps (calibration/fast_grid.py KV_WARPS)
SLOTS = 3                        # segment slots one launch compiles (fast_kv_attn._lowbit_decode)
WIDTHS = (2, 4, 8, 16)           # the code widths it has loops for
BLOCKS = (32, 64, 128)           # token blocks compiled: min(128, the K group)
COUNTED_BLOCK = 128              # the block the family's counts are per element of (its fit's rows)
# (slot widths ascending, token block, inline-PTX dequant) -> (shared memory bytes, registers
# per thread): calibration/fast_occupancy.py, compiled by Triton 3.6 (the H100 call's version,
# calibration/data/h100_fast_kernels.jsonl) for sm_90a, 4 warps, 2 stages, head dim 128; the
# entries the measured and planned layouts use (block 64 portable only; a missing inline-PTX
# entry falls back to the portable one)
COMPILED = {
    ((2, 2, 2), 128, False): (17408, 188),
    ((2, 2, 4), 128, False): (21248, 181),
    ((2, 2, 8), 128, False): (37632, 184),
    ((2, 2, 16), 128, False): (73728, 168),
    ((2, 4, 4), 128, False): (33792, 168),
    ((2, 4, 8), 128, False): (37632, 192),
    ((2, 4, 16), 128, False): (73728, 181),
    ((2, 8, 8), 128, False): (66560, 182),
    ((2, 8, 16), 128, False): (73728, 192),
    ((2, 16, 16), 128, False): (131072, 168),
    ((4, 4, 4), 128, False): (33792, 179),
    ((4, 4, 8), 128, False): (37632, 188),
    ((4, 4, 16), 128, False): (73728, 181),
    ((4, 8, 8), 128, False): (66560, 182),
    ((4, 8, 16), 128, False): (73728, 188),
    ((4, 16, 16), 128, False): (131072, 187),
    ((16, 16, 16), 128, False): (131072, 96),
    ((2, 2, 2), 128, True): (17408, 168),
    ((2, 4, 8), 128, True): (37632, 181),
    ((2, 16, 16), 128, True): (131072, 168),
    ((4, 4, 4), 128, True): (33792, 166),
    ((4, 16, 16), 128, True): (131072, 153),
    ((2, 2, 2), 32, False): (5120, 122),
    ((2, 16, 16), 32, False): (32768, 122),
    ((2, 16, 16), 32, True): (32768, 115),
    ((2, 2, 2), 64, False): (9216, 156),
    ((2, 16, 16), 64, False): (65536, 148),
}
# (slot widths ascending, token block, inline-PTX dequant) -> (shared memory bytes, registers per
# thread, threads): the device's own compile, recorded by every timed kv row of
# calibration/data/h100_fast_kernels_lean.jsonl (H100, Triton 3.6; `python calibration/fast_occupancy.py
# --measured` on it prints this), taken before COMPILED: this host's compile differs for three
# (fast2_lean 188 registers, adaptive-2 asm 181, fast4_lean asm 166), compiled without the launch's
# specialisations (lengths divisible by 16, split counts of 1; with them: 193, 168, 153). No H200 has recorded its
# programs: it is compute capability 9.0 as the H100 (CUDA C++ Programming Guide, "Compute
# Capabilities"), so Triton builds the same sm_90a cubin for it and these rows serve both chips.
MEASURED = {
    ((2, 2, 2), 128, False): (17408, 193, 128),
    ((2, 2, 2), 128, True): (17408, 168, 128),
    ((2, 4, 8), 128, True): (37632, 168, 128),
    ((2, 16, 16), 128, False): (131072, 168, 128),
    ((2, 16, 16), 128, True): (131072, 168, 128),
    ((4, 4, 4), 128, True): (33792, 153, 128),
}
# lanes per element of each width's loop, the throughput bound under its latency: SASS counts
# of the inline-PTX loop at block 128 (calibration/fast_sass.py, calibration/data/fast_kernels_sass.txt)
LANE_OPS = {2: 3.34, 4: 2.41, 8: 2.59, 16: 0.78}


@dataclass(frozen=True)
class Program:
    """One program (CTA) of the kernel as compiled, and its token block."""

    threads: int
    regs: int
    smem: int
    block: int = COUNTED_BLOCK

    @property
    def chain_scale(self) -> float:
        """The loop's latency is per iteration, whatever its tokens (measured on an H100: 2.4-3.1
        us a 128-token iteration at 2, 4 and 16 bits, 1.7-3.7 us a 32-token one of kivi-2's;
        validation/fast_kernels_measured.md): a count per element of a COUNTED_BLOCK-token
        iteration is COUNTED_BLOCK / block times as many per element of a smaller block's."""
        return COUNTED_BLOCK / self.block


def kernel_width(bits: float) -> int:
    """The loop a class of `bits`-bit codes runs in: the narrowest compiled width holding it."""
    return next((w for w in WIDTHS if w >= bits), WIDTHS[-1])


def slot_widths(widths, lean: bool = False) -> tuple[int, ...]:
    """The three slots' widths, ascending, for a cache whose classes store `widths`: one slot per
    distinct width (the widest three, should there be more), the rest empty, compiled at 16 bits
    (the measured kernel) or, `lean`, at the first width (no 16-bit code)."""
    present = sorted({kernel_width(b) for b in widths})[-SLOTS:]
    pad = present[0] if lean else 16
    return tuple(sorted(present + [pad] * (SLOTS - len(present))))


def program(widths, group: int, asm: bool = True, lean: bool = False) -> Program | None:
    """The compiled program for a cache of these class widths and K group (None: not compiled;
    the engine's default occupancy then). Block: min(128, group), as FastKVAttention takes it.
    The device's record first (MEASURED), else this host's compile; a missing inline-PTX entry
    falls back to the portable one."""
    block = max((b for b in BLOCKS if b <= group), default=BLOCKS[0])
    slots = slot_widths(widths, lean)
    for key in ((slots, block, asm), (slots, block, False)):
        if key in MEASURED:
            smem, regs, threads = MEASURED[key]
            return Program(threads, regs, smem, block)
        if key in COMPILED:
            return Program(THREADS, COMPILED[key][1], COMPILED[key][0], block)
    return None


def class_widths(fmt) -> list[float]:
    """The widths a KvFormat's classes with tokens store (K and V of the routine class both)."""
    out = [fmt.routine.key_bits, fmt.routine.value_bits]
    out += [fmt.sink_bits] if fmt.sinks else []
    out += [fmt.outlier_bits] if fmt.outlier_fraction else []
    out += [fmt.recent_bits] if fmt.recent else []
    return out


def of_format(fmt) -> Program | None:
    """The program reading this cache (a KvFormat costed by the fast family: integer codes)."""
    if fmt.element != "int" or not fmt.kernel_ops_by_bits:
        return None
    return program(class_widths(fmt), fmt.group_size)


def lane_ops_per_element(fmt, context: int) -> float:
    """Lanes per cached element the loops issue (the bound under their latency), averaged over
    the classes' tokens as the family's own count is."""
    return replace(fmt, kernel_ops_by_bits=tuple((float(w), v) for w, v in LANE_OPS.items())
                   ).dequant_ops_per_element(context)
