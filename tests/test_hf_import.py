"""Models from their Hugging Face config.json (issue 46): the 12 shipped YAMLs equal their real
configs, parameter counts against published figures and a hand count, KV bytes per token by
hand, quantization per tensor class, and every refusal names the field and the file (exit 2)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hwsim.config.files import load_model
from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.model import weight_format
from hwsim.model.hf_import import import_config, load
from hwsim.model.shapes import builtin_models
from hwsim.pipeline import run_config

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
HWSIM = [sys.executable, "-m", "hwsim.cli"]
B = 1e9


def figures(name: str) -> dict:
    return import_config(str(CONFIGS / f"{name}.json")).figures()


@pytest.mark.parametrize("name", builtin_models())
def test_shipped_yaml_equals_its_config_json(name):
    shipped, imported = load_model(name), load(str(CONFIGS / f"{name}.json"))
    skip = {"name", "source", "weights"}
    assert imported.model_dump(exclude=skip) == shipped.model_dump(exclude=skip)
    assert weight_format.plan(None, imported.weights) == weight_format.plan(None, shipped.weights)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "gpt-oss-20b", "deepseek-v2-lite"])
def test_same_step_time_from_config_json(name):
    sets = ["workload.decode_steps=1", "workload.context_tokens=1024"]
    by_name = run_config(load_scenario(None, [*sets, f"model={name}"]), intervals=False).summary
    by_json = run_config(load_scenario(None, [*sets, f"model={CONFIGS / name}.json"]), intervals=False).summary
    assert by_json["itl_ms"]["mean"] == pytest.approx(by_name["itl_ms"]["mean"], rel=1e-9, abs=0)


# Published totals and active counts (model cards, papers). gpt-oss's and DeepSeek's active
# figures leave out the embedding table (the model card: "active parameters ... not counting
# the embedding"); the contract counts it, so their test subtracts vocab x hidden.
PUBLISHED = {  # name: (total, active, active leaves out the embedding table, tolerance)
    "mixtral-8x7b": (46.7 * B, 12.9 * B, False, 0.01),
    "deepseek-v3": (671 * B, 37 * B, True, 0.015),     # "37B": two figures, rounding is 1.35%
    "qwen3-30b-a3b": (30.5 * B, 3.3 * B, False, 0.02),  # "3.3B" two figures
    "gpt-oss-20b": (20.91 * B, 3.61 * B, True, 0.01),
    "gpt-oss-120b": (116.83 * B, 5.13 * B, True, 0.01),
    "llama-3.1-8b": (8.03 * B, 8.03 * B, False, 0.01),
    "qwen3-235b-a22b": (235 * B, 22 * B, False, 0.01),
    "phi-3.5-moe": (41.9 * B, 6.6 * B, False, 0.01),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_params_against_published_figures(name):
    total, active, without_table, tol = PUBLISHED[name]
    f = figures(name)
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    table = cfg["vocab_size"] * cfg["hidden_size"] if without_table else 0
    assert f["params"]["total"] == pytest.approx(total, rel=0.01)
    assert f["params"]["active_per_token"] - table == pytest.approx(active, rel=tol)


def test_params_by_hand():
    """Mixtral-8x7B counted by hand: attention q,k,v,o; 8 experts of 3 matrices; router; two norms."""
    h, ffn, vocab, layers = 4096, 14336, 32000, 32
    attn = h * (32 * 128) * 2 + h * (8 * 128) * 2
    layer = attn + 8 * 3 * h * ffn + h * 8 + 2 * h
    f = figures("mixtral-8x7b")
    assert f["params"]["total"] == layers * layer + 2 * vocab * h + h
    assert f["params"]["active_per_token"] == layers * (layer - 6 * 3 * h * ffn) + 2 * vocab * h + h


def test_tied_embeddings_counted_once(tmp_path):
    f = figures("granite-3.0-3b-a800m")
    cfg = json.loads((CONFIGS / "granite-3.0-3b-a800m.json").read_text())
    path = tmp_path / "untied.json"
    path.write_text(json.dumps(dict(cfg, tie_word_embeddings=False)))
    g = import_config(str(path)).figures()
    assert g["params"]["total"] - f["params"]["total"] == cfg["vocab_size"] * cfg["hidden_size"]
    assert f["params"]["total"] == pytest.approx(3.3 * B, rel=0.01)


@pytest.mark.parametrize("name, kv, window_layers", [
    ("llama-3.1-8b", 32 * 2 * 8 * 128 * 2, 0),           # layers x (K, V) x KV heads x head_dim x bf16
    ("deepseek-v3", 61 * (512 + 64) * 2, 0),              # MLA: latent + rope per layer
    ("deepseek-v2-lite", 27 * (512 + 64) * 2, 0),
    ("gpt-oss-20b", 12 * 2 * 8 * 64 * 2, 12),             # the 12 odd layers keep every token
    ("qwen3-30b-a3b", 48 * 2 * 4 * 128 * 2, 0),
    ("glm-4.5", 92 * 2 * 8 * 128 * 2, 0),
    ("mistral-7b-v0.1", 0, 32),                           # a 4096-token window on every layer
    ("phi-3.5-moe", 32 * 2 * 8 * 128 * 2, 0),             # its window is the whole 131072 context
])
def test_kv_bytes_per_token_by_hand(name, kv, window_layers):
    f = figures(name)
    assert (f["kv_bytes_per_token"], f["sliding_window_layers"]) == (kv, window_layers)


def test_mtp_and_dense_layers_read():
    shape = load(str(CONFIGS / "glm-4.5.json"))
    assert (shape.moe.dense_layers, shape.moe.shared_experts, shape.attention.head_dim) == (3, 1, 128)
    assert figures("glm-4.5")["params"]["mtp"] > 0 and figures("deepseek-v3")["params"]["mtp"] > 0


def _variant(tmp_path, base: str, quant_file: dict | None = None, **changes) -> str:
    cfg = json.loads((CONFIGS / f"{base}.json").read_text())
    cfg.update(changes)
    cfg = {k: v for k, v in cfg.items() if v is not ...}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    if quant_file is not None:
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant_file))
    return str(tmp_path)


def test_qwen_mlp_only_layers_lead_as_dense_layers(tmp_path):
    shape = load(_variant(tmp_path, "qwen3-30b-a3b", mlp_only_layers=[0, 1]))
    assert (shape.moe.dense_layers, shape.ffn) == (2, 6144)
    with pytest.raises(ConfigError, match="mlp_only_layers"):
        load(_variant(tmp_path, "qwen3-30b-a3b", mlp_only_layers=[5]))
    with pytest.raises(ConfigError, match="decoder_sparse_step"):
        load(_variant(tmp_path, "qwen3-30b-a3b", decoder_sparse_step=2))


def test_quantization_per_tensor_class(tmp_path):
    nvfp4 = {"quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                              "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}}
    w = load(_variant(tmp_path, "qwen3-30b-a3b", nvfp4)).weights
    assert (w["experts"].format, w["experts"].group_size) == ("nvfp4", 16)
    assert "attention" not in w and "embeddings" not in w
    awq = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"}
    w = load(_variant(tmp_path, "llama-3.1-8b", quantization_config=awq)).weights
    assert (w["experts"].format, w["experts"].group_size, w["attention"].format) == ("int4", 64, "int4")
    assert "embeddings" not in w
    ct = {"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*mlp.gate$"],
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
              "num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}}}}
    w = load(_variant(tmp_path, "qwen3-30b-a3b", quantization_config=ct)).weights
    assert (w["experts"].format, w["experts"].group_size, w["attention"].format) == ("fp8", 16384, "fp8")


def test_half_a_class_quantized_is_refused(tmp_path):
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128],
           "modules_to_not_convert": ["model.layers.0.self_attn"]}
    with pytest.raises(ConfigError, match="modules_to_not_convert.*one format per tensor class"):
        load(_variant(tmp_path, "llama-3.1-8b", quantization_config=fp8))


def _run(*args):
    return subprocess.run([*HWSIM, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("change, field", [
    ({"model_type": "qwen3_next"}, "model_type"),
    ({"model_type": "falcon"}, "model_type"),
    ({"layer_types": ["linear_attention"] * 36}, "layer_types"),
    ({"some_new_mixer": 4}, "some_new_mixer"),
    ({"num_attention_heads": 30}, "num_key_value_heads"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantization_config.quant_method"),
])
def test_refusals_exit_2_naming_field_and_file(tmp_path, change, field):
    path = _variant(tmp_path, "qwen3-8b", **change)
    done = _run("model", "import", path, "--json")
    assert done.returncode == 2 and done.stdout == ""
    assert f"key '{field}'" in done.stderr and "config.json" in done.stderr and "Traceback" not in done.stderr


def test_import_cli_contract_and_yaml_round_trip(tmp_path):
    out = tmp_path / "m.yaml"
    done = _run("model", "import", str(CONFIGS / "deepseek-v3.json"), "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    f = json.loads(done.stdout)
    assert {"total", "active_per_token"} <= set(f["params"])
    assert (f["kv_bytes_per_token"], f["sliding_window_layers"]) == (61 * 576 * 2, 0)
    text = out.read_text()
    assert "kv_lora_rank: 512  # kv_lora_rank" in text and "first_k_dense_replace" in text
    skip = {"name", "source"}
    assert load_model(str(out)).model_dump(exclude=skip) == load_model("deepseek-v3").model_dump(exclude=skip)


def test_context_past_max_position_embeddings_is_refused():
    with pytest.raises(ConfigError, match="max_position_embeddings 4096"):
        load_scenario(None, [f"model={CONFIGS / 'olmoe-1b-7b.json'}", "workload.context_tokens=5000"])


def test_dry_run_lists_fields_read_and_ignored():
    done = _run("run", "--dry-run", "--set", f"model={CONFIGS / 'llama-3.1-8b.json'}")
    assert done.returncode == 0, done.stderr
    assert "read and ignored" in done.stdout and "rope_scaling" in done.stdout
