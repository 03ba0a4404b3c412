"""A kernel trace's KV reads in its breakdown. A traced decode attention kernel (FlashAttention's
split-KV over every query head, one query row padded to a 64-row MMA tile) is compute-bound in the
engine, so its whole time went to attention_compute and the breakdown showed no kv_read although
the step reads the whole cache (8.6 GB at batch 64, context 1024 for Mixtral). Here the time its KV
bytes take at the chip's HBM read rate is kv_read and only the rest attention_compute; the step's
total is unchanged (issue 47)."""

from __future__ import annotations

from hwsim.metrics import Component


def kv_attributed(breakdown: dict[str, float], kv_read_bytes: float, hbm_read_bytes_s: float) -> dict[str, float]:
    """`breakdown` (seconds by component) with the streaming time of the attention kernels' KV
    bytes moved from attention_compute to kv_read (no more than attention_compute holds)."""
    compute = breakdown.get(Component.ATTENTION_COMPUTE.value, 0.0)
    moved = min(compute, kv_read_bytes / hbm_read_bytes_s) if kv_read_bytes > 0 else 0.0
    if moved <= 0:
        return breakdown
    out = dict(breakdown)
    out[Component.ATTENTION_COMPUTE.value] = compute - moved
    out[Component.KV_READ.value] = out.get(Component.KV_READ.value, 0.0) + moved
    return out
