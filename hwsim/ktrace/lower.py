"""Lower typed work items to the engine's kernels, built by the same builders (and the same
weight and KV formats) as hwsim's own schedule, so the simulated device times them from their
shapes. What has no shape to time is a HeldWork of the documented fallback."""

from __future__ import annotations

from dataclasses import dataclass, field

from hwsim.engine.host import HeldWork
from hwsim.engine.cluster import Cluster
from hwsim.hw.host_links import HOST_LINKS
from hwsim.model import ir
from hwsim.ktrace.shapes import weight_class
from hwsim.metrics import Component
from hwsim.model import moe_kernels, ops
from hwsim.model.kernel import Kernel, copy_kernel
from hwsim.model.schedule import (INDEX_ADD_TRIPS_PER_ROW, INDEX_SELECT_TRIPS_PER_ROW, SMALL_INDEX_ROWS,
                                  Schedule, StepShape)
from hwsim.parallel import collectives

# A tensor up to half the L2 is read from (written into) L2, as the kernel before it left it; a
# larger one streams from (to) HBM (ops.in_hbm). What a kernel streamed since is the L2 walk's
# (ktrace/schedule.py: l2_walked). A gather or scatter loads its index first (ops.INDEX_TRIPS: the
# large-index kernels; the small-index ones chain a load a row).
EW_OPS_PER_BYTE = ops.EW_OPS_PER_BYTE   # a generic element-wise kernel's ops (ops.py says why)
DATA = {"experts": Component.EXPERT_READ, "attention": Component.WEIGHT_READ,
        "embeddings": Component.WEIGHT_READ}
HOST_LINK = HOST_LINKS["pcie-gen5"]
COPY_DEVICE_LATENCY_S = 1.44e-6   # a host<->device copy's own time on the device's timeline (the host's
                                  # call and wait are the trace's host steps): small DtoH copies of 1-8 bytes
                                  # (.item(), .nonzero()) last 1.44 us, median of 4,097 in the H100 traces
                                  # (validation/data/hf_traces_h100; 1.38-3.1 us). HOST_LINK.latency_s (10 us)
                                  # is the whole call, host side included


@dataclass
class Lowering:
    """The target: its schedule (chip, model, weight plan, KV format, memory map), and the
    traced collectives' group on the target's topology (None: they are held as traced)."""
    schedule: Schedule
    group: Cluster | None = None
    _collective_s: dict = field(default_factory=dict, repr=False)

    def kernels(self, name: str, item: ir.WorkItem, traced_s: float) -> list:
        s = self.schedule
        chip, model = s.chip, s.model
        if isinstance(item, ir.Gemm):
            return self._gemm(name, item) if min(item.m, item.n, item.k, item.batch) > 0 else []
        if isinstance(item, ir.GroupedGemm):
            if not any(item.rows) or not item.n or not item.k:
                return []
            fmt = s.wplan.of("experts")
            return [moe_kernels.grouped_gemm(name, -1, list(item.rows), item.k, item.n, chip,
                                             weight_addr=self._addr(), weight_bytes=s.wb_cls["experts"],
                                             data=Component.EXPERT_READ, dequant=fmt.dequant)]
        if isinstance(item, ir.Attention):
            a = model.attention
            if item.phase == "decode":
                # the traced query tokens a sequence (a verification step: Q > 1), keys as traced
                q = max(1, item.q_len)
                shape = StepShape("decode", item.batch, item.batch * q, max(0, item.kv_len - 1), queries=q)
                qk, v = a.dims
                return [copy_kernel(k, name=f"{name}{k.name[len('L0.attention'):]}")
                        for k in s._decode_attention(0, shape, item.kv_heads, qk, v)]
            return [ops.prefill_attention(name, -1, item.q_len, item.heads, item.kv_heads, item.head_dim,
                                          item.head_dim, chip)] * item.batch
        if isinstance(item, ir.Memory):
            # the KV cache as the step before left it (a cat appending to it, a copy expanding it):
            # a whole step of weights has streamed through the L2 since, so it comes from HBM
            cache_read = item.reads_cache
            if item.share_in_flight and item.ctas and item.threads:
                return [ops.pointwise_blocks(name, -1, item.read_bytes, item.write_bytes, item.ctas, item.threads,
                                             chip, from_hbm=cache_read or self._in_hbm(item.read_bytes),
                                             to_hbm=self._in_hbm(item.write_bytes), weight_addr=self._addr())]
            if item.kind == "cat" and not item.vectorized:
                return [ops.strided_cat(name, -1, item.read_bytes, item.write_bytes, chip, weight_addr=self._addr(),
                                        from_hbm=cache_read or self._in_hbm(item.read_bytes))]
            if item.kind == "reduction" and item.threads and (0 < item.ctas < chip.sms or item.passes > 1):
                return [ops.grid_limited(name, -1, item.read_bytes, item.write_bytes, item.ctas, item.threads,
                                         chip, from_hbm=self._in_hbm(item.read_bytes), weight_addr=self._addr(),
                                         passes=item.passes)]
            trips, input_trips = (ops.INDEX_TRIPS if item.kind in ("index", "scatter") else 1), 1
            if 0 < item.index_rows <= SMALL_INDEX_ROWS:     # ATen's small-index kernel, as the built-in schedule's
                per_row = INDEX_SELECT_TRIPS_PER_ROW if item.kind == "index" else INDEX_ADD_TRIPS_PER_ROW
                trips, input_trips = 1 + per_row * item.index_rows, item.index_rows
            return [self._memory(name, item.read_bytes, item.write_bytes, item.vectorized, cache_read,
                                 trips=trips, input_trips=input_trips)]
        if isinstance(item, ir.Memset):
            return [self._memory(name, 0.0, item.nbytes, True)]
        if isinstance(item, ir.Memcpy):
            if item.direction in ("DtoD", "PtoP"):
                return [self._memory(name, item.nbytes, item.nbytes, True)]
            return [HeldWork(name, COPY_DEVICE_LATENCY_S + item.nbytes / (HOST_LINK.bytes_s * HOST_LINK.efficiency))]
        if isinstance(item, ir.Absorbed):
            return []
        if isinstance(item, ir.Collective) and (modelled := self.collective_s(item)) is not None:
            return [HeldWork(name, modelled)]
        return [HeldWork(name, traced_s)]      # Unclassified, and a Collective not re-timed: as traced

    def collective_s(self, c: ir.Collective) -> float | None:
        """hwsim's time for this call alone on the group (hwsim/parallel/collectives.alone_s);
        None where it is held as traced: no group, no bytes (no op shapes), or a kind the model
        lacks (send_recv)."""
        if self.group is None or c.nbytes <= 0:
            return None
        key = (c.kind, c.nbytes)
        if key not in self._collective_s:
            self._collective_s[key] = collectives.alone_s(self.group, c.kind, c.nbytes)
        return self._collective_s[key]

    def _addr(self) -> int:
        return self.schedule.activation_address

    def _gemm(self, name: str, g: ir.Gemm) -> list[Kernel]:
        s = self.schedule
        if not g.weight or g.batch > 1:        # both operands activations: B streams once per batch
            return ops.gemm(name, -1, g.m, g.k, g.n * g.batch, s.chip, weight_addr=self._addr(),
                            weight_bytes=ops.ACT_BYTES, data=Component.ACTIVATION_IO)
        cls = weight_class(s.model, g.k, g.n)
        fmt = s.wplan.of(cls)
        if fmt.is_bf16:
            dtype = g.dtype if g.dtype in s.chip.tensor_dtypes else "bf16"
            return ops.gemm(name, -1, g.m, g.k, g.n, s.chip, weight_addr=self._addr(), weight_bytes=s.wb,
                            data=DATA[cls], dtype=dtype)
        return s._quant_gemm(fmt, name, -1, g.m, g.k, g.n, self._addr(), DATA[cls],
                             Component.GEMM_COMPUTE, 0.0, -1, ())

    def _in_hbm(self, nbytes: float) -> bool:
        """Whether a tensor of this size streams from (to) HBM rather than staying in L2."""
        return ops.in_hbm(self.schedule.chip, nbytes)

    def _memory(self, name: str, read: float, write: float, vectorized: bool, cache_read: bool = False,
                trips: float = 1, input_trips: float = 1) -> Kernel:
        return ops.streamed_copy(name, -1, read, write, EW_OPS_PER_BYTE, self.schedule.chip, from_cache=cache_read,
                                 addr=self._addr(), vectorized=vectorized, trips=trips, input_trips=input_trips)
