"""Many GPUs: topologies, the communication kernels that move bytes between them, and the
collectives those kernels run on a Cluster's simulated links (docs/multi_gpu.md)."""
