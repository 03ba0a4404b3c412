"""The SM array: load pipes (Little's law), tensor cores and integer ALUs.

A resident thread block keeps at most `inflight_bytes_per_block` of loads outstanding, so
it can pull at most inflight / latency bytes per second however idle HBM is. We serve that
as a FIFO server whose work unit is byte-seconds (bytes x load latency) at a rate of
`inflight` bytes: a tile that streams b bytes at latency L occupies its block slot's pipe
for b * L / inflight. This is why a kernel with few thread blocks is slower per byte than a
full-chip one, and why two resident blocks per SM pull more than one.
"""

from __future__ import annotations

from hwsim.hw.chip import ChipSpec
from hwsim.hw.server import Server


class SmArray:
    def __init__(self, chip: ChipSpec):
        self.chip = chip
        self.count = chip.sms
        slots = chip.sms * chip.cta_slots_per_sm
        self.load_pipes = [Server(f"slot{i}.load", chip.inflight_bytes_per_block) for i in range(slots)]
        self.tensor = [Server(f"sm{i}.tensor", 1.0) for i in range(chip.sms)]
        self.alu = [Server(f"sm{i}.alu", 1.0) for i in range(chip.sms)]

    def load_pipe(self, slot: int) -> Server:
        """Block slot `slot`'s load pipe; kernels of small blocks hold more slots than the
        profile's default occupancy, made on first use."""
        while slot >= len(self.load_pipes):
            self.load_pipes.append(Server(f"slot{len(self.load_pipes)}.load", self.chip.inflight_bytes_per_block))
        return self.load_pipes[slot]

    def load_time(self, hbm_bytes: float, l2_bytes: float, chip_hbm_bytes: float = 0.0,
                  inflight: float = 0.0) -> float:
        """Seconds one block slot's pipe is busy streaming these bytes (Little's law), with
        `inflight` bytes outstanding (0: the chip's per-block default).

        Latency grows with load: while `chip_hbm_bytes` stream from HBM chip-wide, each request
        also waits behind its share of them (queueing_factor x bytes / achieved bandwidth), so
        a block streams faster when few blocks run than when the whole chip does.
        """
        c = self.chip
        unloaded = (hbm_bytes * c.miss_latency_s + l2_bytes * c.hit_latency_s) / (inflight or c.inflight_bytes_per_block)
        if not (hbm_bytes and chip_hbm_bytes):
            return unloaded
        return unloaded + c.hbm_queueing_factor * chip_hbm_bytes / c.hbm_read_bytes_s

    def trips_latency(self, hbm_read: float, miss_trips: float, trips: float) -> float:
        """Seconds of `trips` of a kernel's dependent round trips: at HBM latency when it reads
        HBM (`hbm_read` bytes), except for the `miss_trips` of them that do when only evicted
        activations come from HBM (the rest, an index or a setup load, still hit in L2;
        negative: all of them)."""
        c = self.chip
        if not hbm_read:
            return c.hit_latency_s * trips
        if miss_trips < 0:
            return c.miss_latency_s * trips
        misses = min(trips, miss_trips)
        return c.hit_latency_s * (trips - misses) + c.miss_latency_s * misses

    def compute_time(self, tensor_flops: float, vector_flops: float, int_ops: float, dtype: str,
                     decoder_elements: float = 0.0, mma_sync: bool = False, share: float = 0.0) -> float:
        """Seconds of SM compute for one tile. Tensor MMAs, the ALUs and a native decoder are
        separate pipes that overlap; vector and integer work share the ALU issue slots. `share`:
        the kernel's own share of the tensor peak (Kernel.tensor_share; 0: the chip's)."""
        c = self.chip
        tensor = tensor_flops / c.tensor_rate_per_sm(dtype, mma_sync, share) if tensor_flops else 0.0
        alu = 0.0
        if vector_flops:
            alu += vector_flops / (c.vector_flops / c.sms)
        if int_ops:
            alu += int_ops / (c.alu_int_ops_per_clk * c.clock_hz)
        decoder = 0.0
        if decoder_elements:
            assert c.decoder_elements_per_clk, "decoder work on a chip without a decoder"
            decoder = decoder_elements / (c.decoder_elements_per_clk * c.clock_hz)
        return max(tensor, alu, decoder)

