"""Hardware: a device's units (SMs, L2, HBM, bus, copy engines, decoder, ports), the FIFO
servers that time requests inside one work item, and the cluster of devices and links."""
