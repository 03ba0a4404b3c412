"""Occupancy of the fast KV kernel (issue 44): programs an SM holds from the compiled program's
warps, registers and shared memory, and a latency-bound loop overlapped by them."""

import json
import sys
from pathlib import Path

from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec
from hwsim import operators as mb
from hwsim.hw.occupancy import resident_blocks
from hwsim.model import fast_kv_occupancy as fko, ops
from hwsim.model.kernel import Kernel


def _chip():
    return ChipSpec.from_profile(load_profile("h100-sxm"))


def _resident(widths, group=128, lean=False, asm=False):
    c, p = _chip(), fko.program(widths, group, asm=asm, lean=lean)
    return resident_blocks(c.regs_per_sm, c.smem_bytes_per_sm, p.threads, p.regs, p.smem)


ROOT = Path(__file__).resolve().parents[1]


def test_the_measured_layouts_resident_programs():
    """validation/fast_kernels_measured.md: any 16-bit slot holds an SM to one program; adaptive-2
    runs two portable (this host's 192 registers), three with inline PTX (the device's 168),
    kivi-2 four (block 32), the lean 2-bit kernel two (the device's 193) or three (168)."""
    assert _chip().regs_per_sm == 65536
    assert [_resident(w) for w in ([16], [2], [4])] == [1, 1, 1]
    assert _resident([8, 4, 2]) == 2 and _resident([8, 4, 2], asm=True) == 3
    assert _resident([2, 16], group=32) == 4
    assert _resident([2], lean=True) == 2 and _resident([2], lean=True, asm=True) == 3
    assert _resident([4], lean=True, asm=True) == 3


def test_the_device_records_come_before_this_hosts_compile():
    """The H100's own compile (calibration/data/h100_fast_kernels_lean.jsonl) is the table's
    MEASURED, every timed row's program, and program() takes it where this host compiled otherwise."""
    sys.path.insert(0, str(ROOT / "calibration"))
    from fast_programs import measured_table
    path = ROOT / "calibration/data/h100_fast_kernels_lean.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert measured_table(rows) == fko.MEASURED
    assert fko.COMPILED[((2, 4, 8), 128, True)][1] == 181
    assert fko.program([8, 4, 2], 128, asm=True) == fko.Program(128, 168, 37632)
    assert fko.program([2], 128, asm=False, lean=True).regs == 193
    assert fko.program([2, 16], 32, asm=True) == fko.Program(128, 115, 32768, 32)    # not measured: this host's


def test_slots_pad_with_16_bits_unless_lean():
    assert fko.slot_widths([2]) == (2, 16, 16)
    assert fko.slot_widths([2], lean=True) == (2, 2, 2)
    assert fko.slot_widths([8, 4, 2]) == (2, 4, 8)
    assert fko.slot_widths([1.5, 3, 16]) == (2, 4, 16)


def test_occupancy_limits_each_resource():
    r = 65536, 228 * 1024
    assert resident_blocks(*r, 128, 32, 0) == 16            # warps: 64 / 4
    assert resident_blocks(*r, 128, 255, 0) == 2            # registers: 8192 a warp, 8 warps
    assert resident_blocks(*r, 128, 32, 100 * 1024) == 2    # shared memory, 1 KiB reserved a block
    assert resident_blocks(*r, 32, 16, 0) == 32             # the block cap


def _attention_us(program, chip):
    ks = ops.decode_attention("a", 0, 16, 32, 8, 128, 128, 33 * 1024, 70.0, 0, chip, splits=33,   # 32 waves of 132
                              block_m=ops.MMA_M, dequant_ops_per_token_head=256 * 10.0,
                              program=program, lane_ops_per_token_head=256 * 3.34)
    assert isinstance(ks[0], Kernel) and ks[0].chain_ops > ks[0].int_ops
    return mb.device_time_s(chip, ks) * 1e6


def test_a_latency_bound_loop_runs_faster_with_more_resident_programs():
    """The same work, chain 10 and lanes 3.34 an element, in whole waves: the programs an SM holds
    overlap the chain's stalls (6.66), not the lanes' issue, so two take (3.34 + 6.66 / 2) / 10 of
    one's time and three (3.34 + 6.66 / 3) / 10, not 1/2 and 1/3."""
    chip = _chip()
    one = _attention_us(fko.Program(128, 168, 131072), chip)
    two = _attention_us(fko.Program(128, 188, 17408), chip)
    three = _attention_us(fko.Program(128, 168, 17408), chip)
    assert 0.62 < two / one < 0.70 and 0.52 < three / one < 0.59


def test_tile_fidelity_overlaps_the_chain_alike():
    chip = _chip()
    out = []
    for program in (fko.Program(128, 168, 131072), fko.Program(128, 188, 17408)):
        ks = ops.decode_attention("a", 0, 16, 32, 8, 128, 128, 33 * 1024, 70.0, 0, chip, splits=33,
                                  block_m=ops.MMA_M, dequant_ops_per_token_head=256 * 10.0,
                                  program=program, lane_ops_per_token_head=256 * 3.34)
        _, records = mb.time_kernels(chip, ks[:1], fidelity="tile")
        out.append(sum(r.t_end - r.t_start for r in records))
    assert 0.58 < out[1] / out[0] < 0.70     # the default fidelity's 0.66, within a tenth
