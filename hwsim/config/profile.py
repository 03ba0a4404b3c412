"""Hardware-profile schema: one YAML per chip in hardware_profiles/, units in field names.

Each block maps onto one simulated component (hwsim.hw.*). Efficiency figures that cannot be
read off a datasheet (achieved bandwidth, bytes in flight per SM, fixed kernel costs, launch
overheads) are calibrated from microbenchmarks; their `source` names the measurement.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hwsim.config.dequant_kernels import DequantKernels
from hwsim.config.sourced import Count, Fraction, NonNegativeCount, Positive
from hwsim.config.strict import Strict

TensorDtype = Literal["bf16", "fp16", "fp8", "int8", "fp4"]


class SmArray(Strict):
    """Streaming multiprocessors (NVIDIA SMs, AMD CUs, or an SRAM chip's cores)."""

    count: Count
    clock_mhz: Positive
    tensor_tflops: dict[TensorDtype, Positive] = Field(
        description="dense tensor throughput per dtype for the whole chip")
    tensor_efficiency: Fraction = Field(
        description="fraction of tensor peak a well-shaped GEMM tile sustains")
    mma_sync_efficiency: Fraction = Field(
        description="fraction of tensor peak reached by kernels built on warp-level mma.sync "
                    "(FlashAttention-2 and other SM80-style kernels) rather than the chip's own MMA path")
    vector_tflops_fp32: Positive
    alu_int_ops_per_clk: Positive = Field(
        description="32-bit integer/logic ops per clock per SM (unpack, shift, mask)")
    register_file_kib: Positive
    shared_memory_kib: Positive = Field(description="shared memory (on-chip SRAM) per SM")
    inflight_kib_per_block: Positive = Field(
        description="bytes one resident thread block keeps in flight to memory; with the load "
                    "latency it bounds the bandwidth of a kernel with few blocks (Little's law)")


class L2Cache(Strict):
    capacity_mib: Positive
    bandwidth_gbps: Positive
    hit_latency_ns: Positive


class Hbm(Strict):
    """HBM as stacks x pseudo-channels; addresses are interleaved across all channels."""

    generation: str
    stacks: Count
    channels_per_stack: Count = Field(description="pseudo-channels per stack")
    capacity_gb: Positive
    peak_bandwidth_gbps: Positive
    read_efficiency: Fraction = Field(description="achieved/peak for long streaming reads")
    write_efficiency: Fraction = Field(description="achieved/peak for writes (bus turnaround)")
    access_latency_ns: Positive = Field(description="load-to-use latency of an L2 miss")
    queueing_factor: Positive = Field(
        description="loaded latency: every byte the whole chip has in flight to HBM ahead of a "
                    "request adds queueing_factor / achieved bandwidth to its wait")
    interleave_bytes: Count = Field(description="address-interleave granule across channels")


class CudaRuntime(Strict):
    """The device memory as the CUDA runtime shows it to a process (an engine sizes its KV cache
    from it: hwsim/serving/engines/hf_memory.py)."""

    total_memory_mib: Positive = Field(description="the total torch.cuda.mem_get_info reports (cudaMemGetInfo): "
                                                   "below the nominal capacity, which counts memory the driver keeps")
    context_mib: Positive = Field(description="what a serving process holds outside torch's allocator when "
                                              "its engine sizes the cache: the CUDA context, the driver, loaded kernels")


class Bus(Strict):
    """The on-chip network between HBM controllers, L2 slices and SMs."""

    bandwidth_gbps: Positive
    latency_ns: Positive


class Launch(Strict):
    graph_us: Positive = Field(description="per-kernel dispatch inside a captured graph")
    eager_us: Positive = Field(description="host time to issue one eager launch")


class KernelCosts(Strict):
    fixed_us: Positive = Field(description="per-kernel prologue/epilogue on the device")
    cta_slots_per_sm: Count = Field(description="resident thread blocks per SM for streaming kernels")


class CudnnFprop(Strict):
    """cuDNN's sm90 SDPA forward kernel as it runs a decode with Q > 1 queries a sequence (a
    speculative verification, hwsim/model/multi_query_attention.py): one program walks its
    context a 128-key block at a time, each block's loads, MMAs and softmax in sequence (a
    latency chain, in SM clock cycles), the additive mask's block loads in that chain."""

    key_block_cycles: Positive = Field(description="SM cycles one 128-key block of K and V takes")
    mask_block_cycles_paired: Positive = Field(
        description="cycles a block's mask load adds when its rows are 4-byte aligned (an even key count)")
    mask_block_cycles_unpaired: Positive = Field(
        description="cycles it adds when the rows are only 2-byte aligned (an odd key count)")


class GemmLibrary(Strict):
    """How the vendor GEMM library tiles a matmul on this chip (a software fact, calibrated)."""

    tile_m: Count = Field(description="token rows per tile for skinny (decode) GEMMs")
    tile_n: Count = Field(description="weight rows (output columns) per tile for skinny GEMMs")
    split_k_min_k: Count = Field(description="split-K is used only when K is at least this")
    min_k_per_split: Count = Field(description="split-K never cuts K finer than this")
    narrow_n_blocks: NonNegativeCount = Field(
        description="blocks the library's narrow-N decode GEMMs spread N over (a few rows, a few "
                    "column tiles, K under split_k_min_k); 0: the library picks its base tile there")


class SubByteDecoder(Strict):
    """A native sub-byte decoder in the SM's load path (what-if silicon)."""

    elements_per_clk: Positive = Field(description="decoded elements per clock per SM")
    latency_ns: Positive
    formats: list[str]


class Interconnect(Strict):
    """The device's ports to other devices: scale-up (NVLink through a switch) and scale-out
    (a network interface), each per direction."""

    scaleup_bandwidth_gbps: Positive = Field(description="per direction, all links together")
    scaleup_latency_us: Positive = Field(description="one-way latency of a small message")
    scaleout_bandwidth_gbps: Positive | None = Field(default=None, description="per direction")
    scaleout_latency_us: Positive | None = None


class Power(Strict):
    """Board power and the clock a power limit settles the SMs at (hwsim/hw/power.py): average
    power = idle + clock x^3 + x^2 (tensor + L2 energy) + HBM energy, x = SM clock / maximum."""

    limit_w: Positive = Field(description="board power limit the firmware holds the average to")
    idle_w: Positive = Field(description="board power with the SMs clock-gated")
    clock_w: Positive = Field(description="what keeping the SMs clocked at the maximum adds, busy "
                                          "but not computing (scales with f V^2, V ~ f: x^3)")
    tensor_pj_per_flop: Positive = Field(description="energy of one tensor-core flop (padded to the "
                                                     "MMA shape, random data) at the maximum clock")
    l2_pj_per_byte: Positive = Field(description="energy of one byte served by an L2 hit, at the "
                                                 "maximum clock")
    hbm_pj_per_byte: Positive = Field(description="energy of one byte read or written in HBM "
                                                  "(through the L2 and the network), any clock")
    min_clock_mhz: Positive = Field(description="lowest clock the governor may set")
    tensor_clock_mhz: Positive = Field(description="highest clock dense tensor-core work runs at, "
                                                   "whatever the power (a separate limiter); the "
                                                   "profile's tensor rates are calibrated at it")


class HardwareProfile(Strict):
    name: str
    description: str = ""
    uncertainty: str = Field(min_length=10, description="how far its predictions can be trusted, "
                             "and against what measurements; reported with every run")
    sm: SmArray
    l2: L2Cache
    hbm: Hbm
    bus: Bus
    launch: Launch
    kernel: KernelCosts
    gemm: GemmLibrary
    decoder: SubByteDecoder | None = None
    dequant_kernels: DequantKernels | None = Field(
        default=None, description="software dequant cost per kernel family (no block: the H200's naive "
                                  "fit, hwsim.model.dequant_kernels.NAIVE)")
    cudnn_fprop: CudnnFprop | None = Field(
        default=None, description="no block: cuDNN's Q > 1 kernel has no latency chain of its own "
                                  "(its bytes and MMAs alone time it)")
    interconnect: Interconnect | None = None
    cuda: CudaRuntime | None = Field(default=None, description="no block: engines see the nominal capacity "
                                     "and HF's 0.5 GiB context")
    power: Power | None = Field(default=None, description="no block: the SMs always run at their "
                                "maximum clock and runs report no power")
