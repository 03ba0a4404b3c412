"""Single operators (a GEMM, a copy, a decode-attention call) simulated as a microbenchmark
launches them: the same engine, one operation at a time, on a fresh device.

Used by calibration/compare_h200.py and the tests to hold the profile against measured kernels.
"""

from __future__ import annotations

from hwsim.engine.records import RecordLog, StreamTotals
from hwsim.engine.stream import Stream
from hwsim.engine.timer import KernelTimer
from hwsim.hw.chip import ChipSpec
from hwsim.engine.cluster import Cluster
from hwsim.metrics import Component
from hwsim.model import ops
from hwsim.model.kernel import Kernel
from hwsim.workload.kv_format import ClassWidth, KvFormat

GEMM_WEIGHT_ADDR = 1 << 30


def time_kernels(chip: ChipSpec, kernels: list[Kernel], launch: str = "graph",
                 fidelity: str = "wave") -> tuple[float, RecordLog]:
    """Seconds for `kernels` back to back on one stream, launch gaps included."""
    cluster = Cluster(chip)
    env = cluster.env
    device = cluster.devices[0]
    stream = Stream(env, device, cluster.arbiter, KernelTimer(chip, fidelity, device=device), launch=launch)
    records = RecordLog()
    env.process(stream.run(kernels, 0, records, StreamTotals()))
    env.run()
    return env.now, records


def device_time_s(chip: ChipSpec, kernels: list[Kernel]) -> float:
    """Seconds the kernels run on the device, launch gaps excluded (as CUPTI durations are)."""
    _, records = time_kernels(chip, kernels)
    return sum(r.t_end - r.t_start for r in records)


def gemm_kernels(chip: ChipSpec, m: int, k: int, n: int) -> list[Kernel]:
    return ops.gemm("gemm", 0, m, k, n, chip, weight_addr=GEMM_WEIGHT_ADDR, weight_bytes=2,
                    data=Component.WEIGHT_READ)


def gemm_s(chip: ChipSpec, m: int, k: int, n: int, **kw) -> float:
    return time_kernels(chip, gemm_kernels(chip, m, k, n), **kw)[0]


def stream_kernel(chip: ChipSpec, read_bytes: float, write_bytes: float = 0.0) -> Kernel:
    """An element-wise kernel streaming from and to HBM (buffers larger than the L2)."""
    tiles = max(1, int(-(-(read_bytes + write_bytes) // ops.ELEMENTWISE_TILE_BYTES)))
    return Kernel(name="stream", layer=0, tiles=tiles, hbm_read=read_bytes / tiles,
                  hbm_write=write_bytes / tiles, address=GEMM_WEIGHT_ADDR,
                  data=Component.ACTIVATION_IO, compute=Component.ACTIVATION_IO)


def copy_s(chip: ChipSpec, nbytes: float, **kw) -> float:
    return time_kernels(chip, [stream_kernel(chip, nbytes, nbytes)], **kw)[0]


def tiny_kernel_s(chip: ChipSpec, **kw) -> float:
    """The launch benchmark's kernel: 1024 fp32 elements in and out, L2-resident."""
    k = ops.elementwise("tiny", 0, 4096, 4096, 0.25, chip)
    return time_kernels(chip, [k], **kw)[0]


def decode_attention_s(chip: ChipSpec, batch: int, context: int, heads: int = 32, kv_heads: int = 8,
                       head_dim: int = 128, library: str = "flash", **kw) -> float:
    per_token_head = 2 * head_dim * 2
    ks = ops.decode_attention("attention", 0, batch, heads, kv_heads, head_dim, head_dim, context,
                              per_token_head, GEMM_WEIGHT_ADDR, chip, library=library)
    return time_kernels(chip, ks, **kw)[0]


def fused_lowbit_attention_s(chip: ChipSpec, batch: int, context: int, bits: int, splits: int,
                             relayout_subbyte: float, relayout_byte: float, heads: int = 32,
                             kv_heads: int = 8, head_dim: int = 128) -> float:
    """shared/calibration/qkv_attn.py: packed K/V with an fp16 scale and zero per (token, head),
    unpacked in registers; the partial results are merged by a few torch kernels afterwards."""
    fmt = KvFormat(routine=ClassWidth(bits, bits), sinks=0, sink_bits=16, outlier_fraction=0.0,
                   outlier_bits=16, recent=0, recent_bits=16, group_size=head_dim,
                   scale_format="fp16", zero_point=True, element="int",
                   relayout_ops_subbyte=relayout_subbyte, relayout_ops_byte=relayout_byte)
    elems = 2 * head_dim
    per_token_head = fmt.bytes_per_token(elems, 1, context)
    ks = ops.decode_attention("attention", 0, batch, heads, kv_heads, head_dim, head_dim, context,
                              per_token_head, GEMM_WEIGHT_ADDR, chip, splits=splits,
                              block_m=ops.MMA_M,   # Triton's tl.dot pads the GQA group to 16 rows
                              dequant_ops_per_token_head=elems * fmt.dequant_ops_per_element(context))
    return time_kernels(chip, ks[:1])[0]
