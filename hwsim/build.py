"""Elaboration: a validated Scenario becomes a wired System plus the Schedule that feeds it.

Everything that can be wrong with a scenario fails here, before simulated time is spent.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from hwsim.config.load import load_model, load_profile
from hwsim.config.profile import HardwareProfile
from hwsim.config.scenario import Scenario
from hwsim.hw.chip import ChipSpec
from hwsim.hw.system import System
from hwsim.model.schedule import Schedule
from hwsim.model.shapes import ModelShape
from hwsim.workload import kv_format


@dataclass
class Built:
    scenario: Scenario
    profile: HardwareProfile
    model: ModelShape
    chip: ChipSpec
    env: simpy.Environment
    system: System
    schedule: Schedule
    warnings: list[str]


def build(cfg: Scenario, profile: HardwareProfile | None = None, model: ModelShape | None = None) -> Built:
    profile = profile or load_profile(cfg.hardware)
    model = model or load_model(cfg.model)
    chip = ChipSpec.from_profile(profile)
    env = simpy.Environment()
    system = System(env, chip, launch=cfg.runtime.launch, fidelity=cfg.runtime.fidelity)
    w = cfg.workload
    max_context = w.context_tokens + w.decode_steps + max(w.prompt_tokens, 1)
    schedule = Schedule(model, chip, kv=kv_format.from_config(cfg.kv_cache), dequant=cfg.kv_cache.dequant,
                        moe_schedule=cfg.runtime.moe_schedule, max_batch=w.batch_size,
                        max_context=max_context)
    warnings = []
    need = schedule.mem.allocated_bytes
    if need > chip.hbm_capacity_bytes:
        warnings.append(f"weights + KV cache need {need / 1e9:.1f} GB but {profile.name} has "
                        f"{chip.hbm_capacity_bytes / 1e9:.0f} GB of HBM; simulated as if it fit")
    return Built(cfg, profile, model, chip, env, system, schedule, warnings)
