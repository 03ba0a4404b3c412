"""The HF engine's paged cache is sized as the real engine sized it: every num_blocks transformers
5.17 resolved on the H100 (validation/data/hf_serving/h100_call_s18, h100_call_s19: `event: engine`)
is hwsim's, from the chip's CUDA memory, the context and the weights as torch's caching allocator
reserves them (hwsim/serving/engines/hf_memory.py). Skipped where transformers is absent (the
solve is the library's own PagedAttentionMemoryHandler)."""

import json
import sys
from pathlib import Path

import pytest

from hwsim.serving.engines import hf_memory as hm

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "validation" / "data" / "hf_serving"
MIB = 2**20


def test_caching_allocator_packs_small_and_mid_tensors_as_torch_does():
    # two 8 MiB tensors share a 20 MiB segment (4 MiB left over), a 32 MiB one gets its own, and
    # 1 KiB tensors share one 2 MiB segment
    assert hm.reserved_bytes([8 * MIB, 8 * MIB]) == 20 * MIB
    assert hm.reserved_bytes([8 * MIB, 8 * MIB, 8 * MIB]) == 40 * MIB
    assert hm.reserved_bytes([32 * MIB + 1]) == 34 * MIB
    assert hm.reserved_bytes([1024] * 100) == 2 * MIB
    # a remainder of exactly 1 MiB is not split off a large block (torch splits only above kSmallSize)
    assert hm.reserved_bytes([19 * MIB, 1 * MIB + 512]) == 20 * MIB + 20 * MIB


def test_llama_weights_reserve_what_its_module_order_leaves():
    """Llama-3.1-8B: 15,316.5 MiB of parameters (embedding and LM head 1,002 MiB each), reserved
    15,446 MiB: each layer's k/v projections (8 MiB) leave 4 MiB of a 20 MiB segment."""
    from hwsim.model.shapes import ModelShape, MODEL_DIR
    import yaml
    model = ModelShape(**yaml.safe_load((MODEL_DIR / "llama-3.1-8b.yaml").read_text()))
    sizes = hm.parameter_bytes(model)
    assert sizes[0] == sizes[-1] == 128256 * 4096 * 2
    assert sum(sizes) == 8030261248 * 2                 # 8.03 B parameters (the model card), bf16
    assert hm.reserved_bytes(sizes) == 15446 * MIB


def _measured() -> list[tuple[str, str, int, bool]]:
    """(model, config, num_blocks, made after another engine in its process) of every engine measured."""
    out = []
    for call in ("h100_call_s18", "h100_call_s19"):
        seen = set()
        for line in (DATA / call / "summary.jsonl").read_text().splitlines():
            row = json.loads(line)
            if row.get("event") == "model":
                seen = set()                 # a new process
            if row.get("event") == "engine" and "engine_config" in row:
                out.append((row["model"], row["config"], row["engine_config"]["num_blocks"], bool(seen)))
                seen.add(row["config"])
    return out


def test_every_measured_engine_is_in_the_data():
    assert sorted(_measured()) == sorted([
        ("llama-3.1-8b", "defaults", 1508, False), ("llama-3.1-8b", "graphs", 1345, True),
        ("qwen3-30b-a3b", "defaults", 538, False), ("qwen3-30b-a3b", "graphs", 456, True),
        ("qwen2.5-7b", "defaults", 3013, False), ("qwen3-30b-a3b", "graphs", 467, False)])


@pytest.mark.parametrize("model,config,num_blocks,after", _measured())
def test_num_blocks_is_the_engines_on_the_h100(model, config, num_blocks, after, tmp_path):
    pytest.importorskip("transformers", reason="the hf-engine extra (transformers==5.17.0) is not installed")
    sys.path.insert(0, str(ROOT / "validation"))
    from predict_hf_serving import ENGINE, LEFTOVER_MIB, config_without_notes
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario
    from hwsim.serving.engines import hf
    from hwsim.serving.engines.run import hf_free_bytes

    name = model if model == "llama-3.1-8b" else config_without_notes(str(DATA / "configs" / f"{model}.json"), tmp_path)
    cfg = load_scenario(ROOT / "scenarios" / "engines" / "hf-llama-chat.yaml",
                        ["hardware=h100-sxm", f"model={name}", *ENGINE[config]])
    b = system(cfg)
    shape = hf.model_config(b.model)
    device = hf.on_device(shape, hf.cb_config(dict(cfg.workload.engine.config)))
    free = hf_free_bytes(b) - (LEFTOVER_MIB * MIB if after else 0)
    assert hf.cache_size(shape, device, free) == (8192, num_blocks)


def test_weights_that_leave_no_cache_are_one_clear_error():
    pytest.importorskip("transformers", reason="the hf-engine extra (transformers==5.17.0) is not installed")
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario
    from hwsim.errors import ConfigError
    from hwsim.serving.engines.run import serve_with_engine
    cfg = load_scenario(ROOT / "scenarios" / "engines" / "hf-llama-chat.yaml",
                        ["model=mixtral-8x22b", "hardware=h100-sxm", "parallel.allow_overcommit=true"])
    with pytest.raises(ConfigError, match="leave no memory on h100-sxm for the HF engine's KV cache"):
        serve_with_engine(cfg, system(cfg))


def test_a_context_as_large_as_the_memory_is_refused(tmp_path):
    import yaml
    from typer.testing import CliRunner
    from hwsim.cli import app
    prof = yaml.safe_load((ROOT / "hardware_profiles" / "h100-sxm.yaml").read_text())
    prof["cuda"]["context_mib"]["value"] = 90_000
    (tmp_path / "big-context.yaml").write_text(yaml.safe_dump(prof))
    res = CliRunner().invoke(app, ["run", "--out", str(tmp_path / "out"), "--no-plots", "--set",
                                   f"model={ROOT / 'tests' / 'data' / 'tiny-moe.yaml'}", "--set",
                                   f"hardware={tmp_path / 'big-context.yaml'}", "--set", "workload.decode_steps=1"])
    assert res.exit_code == 2 and "cuda.context_mib" in res.stderr and "big-context.yaml" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_tied_lm_head_is_not_reserved_twice(tmp_path):
    """tie_word_embeddings: transformers ties the head to the embedding table in post_init and the
    engine empties torch's cache before it reads the reservation, so one vocab x hidden table is
    reserved, not two; the same config untied reserves the head's own segment more."""
    from hwsim.model.hf_import import load
    cfg = json.loads((ROOT / "tests" / "data" / "hf_configs" / "granite-3.0-3b-a800m.json").read_text())
    assert cfg["tie_word_embeddings"] is True
    untied_path = tmp_path / "untied.json"
    untied_path.write_text(json.dumps(dict(cfg, tie_word_embeddings=False)))
    tied, untied = load(str(ROOT / "tests" / "data" / "hf_configs" / "granite-3.0-3b-a800m.json")), load(str(untied_path))
    assert (tied.tied_embeddings, untied.tied_embeddings) == (True, False)
    head = cfg["vocab_size"] * cfg["hidden_size"] * 2
    assert hm.parameter_bytes(untied)[:-1] == hm.parameter_bytes(tied)
    assert hm.parameter_bytes(untied)[-1] == head
    # the head (>= 10 MiB) gets a segment of its own, rounded to 2 MiB
    extra = hm.reserved_bytes(hm.parameter_bytes(untied)) - hm.reserved_bytes(hm.parameter_bytes(tied))
    assert extra == -(-head // (2 * MIB)) * 2 * MIB
