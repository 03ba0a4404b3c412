"""Side simulations for two summary figures, above the engine: a KV format's attention speedup
(kv.py) and a weight format's expert-GEMM speedup per kernel family (weights.py), each timing a
kernel alone on a device of its own."""
