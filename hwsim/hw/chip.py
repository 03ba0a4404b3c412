"""The chip in base units (bytes, seconds, ops/s), converted once from a HardwareProfile; and
its sizes apart from its rates (ChipSizes), which is all that a pass's plan is made from."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from hwsim.config.profile import HardwareProfile


@dataclass(frozen=True)
class ChipSizes:
    """What a pass's plan (its kernels and routing: the schedule, the L2 walk, the trace's
    lowering) is made from: the chip's counts and capacities, never its rates. A clock, a
    bandwidth or an efficiency changed (a power governor's probe, a what-if) leaves them
    equal, and equal sizes make the same plans (hwsim/whatif/reuse.py replays them).
    Two entries are not sizes but are what plans read of the rest, and no clock changes
    them: which dtypes the tensor cores run natively, and the L2 miss/hit latency ratio the
    L2 walk weighs an eviction by."""
    name: str
    sms: int
    smem_bytes_per_sm: int
    regs_per_sm: int                          # 32-bit registers of one SM's register file
    cta_slots_per_sm: int
    l2_bytes: float
    hbm_stacks: int
    hbm_channels_per_stack: int
    hbm_interleave_bytes: int
    hbm_capacity_bytes: float
    gemm_tile_m: int
    gemm_tile_n: int
    gemm_split_k_min_k: int
    gemm_min_k_per_split: int
    tensor_dtypes: frozenset[str]             # the tensor cores' native input types
    eviction_latency_ratio: float             # miss over hit latency (the L2 walk's weight)
    gemm_narrow_n_blocks: int = 0             # blocks the library's narrow-N decode GEMMs spread N
                                              # over (hwsim/model/ops.py NARROW_*), 0: it has none
    cudnn_fprop_chain_ops: tuple[float, float, float] = ()   # cuDNN's Q > 1 kernel's chain a 128-key
                                              # block (K and V; mask paired; mask unpaired), in the
                                              # SM's integer issue slots (Kernel.chain_ops): its
                                              # cycles x alu_int_ops_per_clk; (): none

    @property
    def sizes(self) -> "ChipSizes":
        return self


SIZE_FIELDS = frozenset(f.name for f in fields(ChipSizes))


@dataclass(frozen=True)
class ChipSpec:
    name: str
    sms: int
    clock_hz: float
    tensor_flops: dict[str, float]        # whole chip, per dtype
    tensor_efficiency: float
    mma_sync_efficiency: float
    vector_flops: float                   # whole chip, fp32
    alu_int_ops_per_clk: float            # per SM
    smem_bytes_per_sm: int
    regs_per_sm: int                      # 32-bit registers per SM (occupancy: hwsim/hw/occupancy.py)
    inflight_bytes_per_block: float
    l2_bytes: float
    l2_bytes_s: float
    l2_hit_latency_s: float
    hbm_stacks: int
    hbm_channels_per_stack: int
    hbm_capacity_bytes: float
    hbm_peak_bytes_s: float
    hbm_read_efficiency: float
    hbm_write_efficiency: float
    hbm_latency_s: float
    hbm_queueing_factor: float
    hbm_interleave_bytes: int
    bus_bytes_s: float
    bus_latency_s: float
    launch_graph_s: float
    launch_eager_s: float
    kernel_fixed_s: float
    cta_slots_per_sm: int
    gemm_tile_m: int
    gemm_tile_n: int
    gemm_split_k_min_k: int
    gemm_min_k_per_split: int
    gemm_narrow_n_blocks: int
    decoder_elements_per_clk: float | None
    decoder_latency_s: float
    decoder_formats: tuple[str, ...]
    scaleup_bytes_s: float | None = None      # per direction (NVLink), None: no port
    scaleup_latency_s: float = 0.0
    scaleout_bytes_s: float | None = None     # per direction (NIC)
    scaleout_latency_s: float = 0.0
    cuda_total_bytes: float | None = None     # what cudaMemGetInfo reports as the device's total
    cuda_context_bytes: float | None = None   # a serving process's memory outside torch's allocator
    cudnn_fprop_cycles: tuple[float, float, float] = ()   # hardware profile's cudnn_fprop block
    tensor_clock_hz: float | None = None   # the clock tensor-core work runs at most (its own limiter,
                                           # hwsim/hw/power.py); the calibrated tensor rates are at it

    @property
    def hit_latency_s(self) -> float:
        """Load-to-use latency of an L2 hit: network traversal plus the slice lookup."""
        return self.bus_latency_s + self.l2_hit_latency_s

    @property
    def miss_latency_s(self) -> float:
        """Load-to-use latency of an L2 miss: the hit path plus the DRAM access."""
        return self.hit_latency_s + self.hbm_latency_s

    @property
    def hbm_read_bytes_s(self) -> float:
        return self.hbm_peak_bytes_s * self.hbm_read_efficiency

    @property
    def sizes(self) -> ChipSizes:
        """Its sizes, apart from its rates: what plans are made from."""
        return ChipSizes(
            name=self.name, sms=self.sms, smem_bytes_per_sm=self.smem_bytes_per_sm, regs_per_sm=self.regs_per_sm,
            cta_slots_per_sm=self.cta_slots_per_sm, l2_bytes=self.l2_bytes, hbm_stacks=self.hbm_stacks,
            hbm_channels_per_stack=self.hbm_channels_per_stack, hbm_interleave_bytes=self.hbm_interleave_bytes,
            hbm_capacity_bytes=self.hbm_capacity_bytes, gemm_tile_m=self.gemm_tile_m,
            gemm_tile_n=self.gemm_tile_n, gemm_split_k_min_k=self.gemm_split_k_min_k,
            gemm_min_k_per_split=self.gemm_min_k_per_split, tensor_dtypes=frozenset(self.tensor_flops),
            eviction_latency_ratio=self.miss_latency_s / self.hit_latency_s,
            gemm_narrow_n_blocks=self.gemm_narrow_n_blocks,
            cudnn_fprop_chain_ops=tuple(c * self.alu_int_ops_per_clk for c in self.cudnn_fprop_cycles))

    def tensor_rate_per_sm(self, dtype: str, mma_sync: bool = False, share: float = 0.0) -> float:
        """Sustained tensor flop/s of one SM; dtypes without native support run at bf16 rate.
        `share`: a kernel's own measured share of the peak (Kernel.tensor_share), 0: the chip's."""
        peak = self.tensor_flops.get(dtype) or self.tensor_flops["bf16"]
        return peak * (share or (self.mma_sync_efficiency if mma_sync else self.tensor_efficiency)) / self.sms

    def at_sm_clock(self, clock_hz: float) -> "ChipSpec":
        """The chip with its SMs at `clock_hz` (a power-capped clock, hwsim/hw/power.py): their
        vector and integer rates and per-kernel fixed cost scale with it, their tensor rates only
        below `tensor_clock_hz` (dense MMA work is held to that clock anyway). The L2, the on-chip
        network and HBM keep their rates and latencies: with them scaled too, the settled clock
        made Mixtral's 512- and 1024-token prefills 12-13% slow where the H200 loses 2.5%
        (validation/data/h200_step_clocks_2.jsonl; docs/calibration.md); the host's launches
        do not scale either."""
        x = clock_hz / self.clock_hz
        cap = self.tensor_clock_hz or self.clock_hz
        x_tensor = min(clock_hz, cap) / min(self.clock_hz, cap)
        return replace(self, clock_hz=clock_hz,
                       tensor_flops={k: v * x_tensor for k, v in self.tensor_flops.items()},
                       vector_flops=self.vector_flops * x, kernel_fixed_s=self.kernel_fixed_s / x)

    @classmethod
    def from_profile(cls, p: HardwareProfile) -> "ChipSpec":
        d = p.decoder
        net = p.interconnect
        return cls(
            name=p.name,
            sms=p.sm.count.value,
            clock_hz=p.sm.clock_mhz.value * 1e6,
            tensor_flops={k: v.value * 1e12 for k, v in p.sm.tensor_tflops.items()},
            tensor_efficiency=p.sm.tensor_efficiency.value,
            mma_sync_efficiency=p.sm.mma_sync_efficiency.value,
            vector_flops=p.sm.vector_tflops_fp32.value * 1e12,
            alu_int_ops_per_clk=p.sm.alu_int_ops_per_clk.value,
            smem_bytes_per_sm=int(p.sm.shared_memory_kib.value * 1024),
            regs_per_sm=int(p.sm.register_file_kib.value * 1024 // 4),
            inflight_bytes_per_block=p.sm.inflight_kib_per_block.value * 1024,
            l2_bytes=p.l2.capacity_mib.value * 2**20,
            l2_bytes_s=p.l2.bandwidth_gbps.value * 1e9,
            l2_hit_latency_s=p.l2.hit_latency_ns.value * 1e-9,
            hbm_stacks=p.hbm.stacks.value,
            hbm_channels_per_stack=p.hbm.channels_per_stack.value,
            hbm_capacity_bytes=p.hbm.capacity_gb.value * 1e9,
            hbm_peak_bytes_s=p.hbm.peak_bandwidth_gbps.value * 1e9,
            hbm_read_efficiency=p.hbm.read_efficiency.value,
            hbm_write_efficiency=p.hbm.write_efficiency.value,
            hbm_latency_s=p.hbm.access_latency_ns.value * 1e-9,
            hbm_queueing_factor=p.hbm.queueing_factor.value,
            hbm_interleave_bytes=p.hbm.interleave_bytes.value,
            bus_bytes_s=p.bus.bandwidth_gbps.value * 1e9,
            bus_latency_s=p.bus.latency_ns.value * 1e-9,
            launch_graph_s=p.launch.graph_us.value * 1e-6,
            launch_eager_s=p.launch.eager_us.value * 1e-6,
            kernel_fixed_s=p.kernel.fixed_us.value * 1e-6,
            cta_slots_per_sm=p.kernel.cta_slots_per_sm.value,
            gemm_tile_m=p.gemm.tile_m.value,
            gemm_tile_n=p.gemm.tile_n.value,
            gemm_split_k_min_k=p.gemm.split_k_min_k.value,
            gemm_min_k_per_split=p.gemm.min_k_per_split.value,
            gemm_narrow_n_blocks=p.gemm.narrow_n_blocks.value,
            decoder_elements_per_clk=d.elements_per_clk.value if d else None,
            decoder_latency_s=d.latency_ns.value * 1e-9 if d else 0.0,
            decoder_formats=tuple(d.formats) if d else (),
            scaleup_bytes_s=net.scaleup_bandwidth_gbps.value * 1e9 if net else None,
            scaleup_latency_s=net.scaleup_latency_us.value * 1e-6 if net else 0.0,
            scaleout_bytes_s=(net.scaleout_bandwidth_gbps.value * 1e9
                              if net and net.scaleout_bandwidth_gbps else None),
            scaleout_latency_s=(net.scaleout_latency_us.value * 1e-6
                                if net and net.scaleout_latency_us else 0.0),
            cudnn_fprop_cycles=(f.key_block_cycles.value, f.mask_block_cycles_paired.value,
                                f.mask_block_cycles_unpaired.value) if (f := p.cudnn_fprop) else (),
            tensor_clock_hz=p.power.tensor_clock_mhz.value * 1e6 if p.power else None,
            cuda_total_bytes=p.cuda.total_memory_mib.value * 2**20 if p.cuda else None,
            cuda_context_bytes=p.cuda.context_mib.value * 2**20 if p.cuda else None,
        )
