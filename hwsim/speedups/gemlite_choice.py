"""Which 4-bit weight kernel is quicker for one GEMM (issue 44, item 2: "where gemlite beats the
fast W4A16 family, it is the fast family"): hwsim's fast W4A16 kernel (hwsim/model/fast_gemm.py,
group 128) or gemlite's A16W4 kernel at the config it ships for the card (group 64), each simulated
alone on the device as a microbenchmark times it (hwsim.operators)."""

from __future__ import annotations

from hwsim import operators
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model.dequant_kernels import Families
from hwsim.model.fast_gemm import FAST_GROUP, fast_weight_only_gemm
from hwsim.model.weight_format import WeightFormat
from hwsim.model.gemlite_configs import load_configs, pick_config
from hwsim.model.gemlite_gemm import H100_COSTS, GemliteCosts, gemlite_gemm, matmul_type

GEMLITE_GROUP = 64        # the group calibration/measure_gemlite.py measured
GEMLITE_FORMATS = {"int4": 4}   # weight formats a run's fast verdict weighs gemlite at: integer codes
                                # with group scales (not MXFP4/NVFP4), the fast family's width
GEMLITE_FITTED_ON = "h100-sxm"   # the profile whose card calibration/fit_gemlite.py's rows ran on
FAST_W4 = WeightFormat("int4", FAST_GROUP, "fp16", "software")   # as calibration/fast_predictions.py fitted it


def w4_times_us(chip: ChipSpec, families: Families, configs: dict, m: int, k: int, n: int,
                costs: GemliteCosts = H100_COSTS) -> dict:
    """{fast_us, gemlite_us, gemlite_kernel, quicker} for x[m, k] @ W[n, k]^T at 4 bits."""
    addr, data = operators.GEMM_WEIGHT_ADDR, Component.WEIGHT_READ
    fast = families.weights["fast"]
    fast_ks = fast_weight_only_gemm("fast", 0, m, k, n, chip, weight_addr=addr,
                                    weight_bytes=FAST_W4.bytes_per_weight, data=data, ops_per_weight=fast.ops(m))
    f_us = operators.device_time_s(chip, fast_ks) * 1e6
    g_us = gemlite_time_s(chip, m, k, n, 4, GEMLITE_GROUP, addr, data, costs, configs) * 1e6
    return {"fast_us": f_us, "gemlite_us": g_us, "gemlite_kernel": matmul_type(m, 4),
            "quicker": "gemlite" if g_us < f_us else "fast"}


def gemlite_time_s(chip: ChipSpec, m: int, k: int, n: int, bits: int, group: int, addr: int, data: Component,
                   costs: GemliteCosts = H100_COSTS, configs: dict | None = None) -> float:
    """gemlite's GEMM x[m, k] @ W[n, k]^T alone on the device, at the config it ships for the H100
    (the only card whose configs and costs hwsim has: elsewhere an estimate); `configs`: that
    card's, loaded by a caller that times many."""
    cfg, _ = pick_config(configs or load_configs("h100"), m, n, k, group, bits)
    return operators.device_time_s(chip, gemlite_gemm("gemlite", 0, m, k, n, bits, group, cfg, costs, chip,
                                                      weight_addr=addr, data=data))
