"""A transfer between two devices over a link, as a work item of the sharing arbiter.

Alone it takes the link's latency plus its bytes over the link's bandwidth. Meanwhile it uses
the sender's port out and the receiver's port in at full rate, and the HBM of both ends (it
reads on one, writes on the other) in proportion to its bytes: so a transfer and the kernels
on either device slow each other where they meet.
"""

from __future__ import annotations

from hwsim.engine.sharing import Arbiter
from hwsim.hw.cluster import Link
from hwsim.hw.units import Unit


def transfer_shares(link: Link, nbytes: float, duration: float) -> dict[Unit, float]:
    wire = nbytes / link.bytes_s / duration
    out = {port: min(1.0, wire) for port in link.ports}
    for device, efficiency in ((link.src, link.src.chip.hbm_read_efficiency),
                               (link.dst, link.dst.chip.hbm_write_efficiency)):
        hbm_s = nbytes / (device.chip.hbm_peak_bytes_s * efficiency)     # spread over every stack
        for stack in device.hbm_stacks:
            out[stack] = min(1.0, hbm_s / duration)
    return out


def transfer(arbiter: Arbiter, link: Link, nbytes: float, label: str = "transfer"):
    """Process body: move `nbytes` over `link`; returns when the last byte has landed."""
    duration = link.latency_s + nbytes / link.bytes_s
    item = arbiter.submit(label, duration, transfer_shares(link, nbytes, duration))
    yield item.done
    end = arbiter.env.now
    stretch = (end - item.start) / duration
    for port in link.ports:
        port.busy_s += nbytes / port.rate
        port.served += nbytes
        port.record(item.start, end, label, min(1.0, nbytes / port.rate / duration) / stretch)
    return end
