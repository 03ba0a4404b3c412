"""Issue 42: the dequant choice, the kernel families, the KV codes and the KV cache's storage are
types. Every name the schema accepts has its type; the KV cache's kind follows from its widths
and element; its resolved form keeps the one-bag YAML keys in their order."""

from __future__ import annotations

import typing

import pytest

from hwsim.config import dequant
from hwsim.config.scenario import (Bf16Kv, Fp8Kv, IntKv, KvCache, TensorWeights, VqKv, Weights, kernel_dequant,
                                   kv_cache)
from hwsim.workload.kv_format import CODES, from_config

KV_KEYS = ["preset", "bits", "key_bits", "value_bits", "element", "group_size", "scale_format", "zero_point",
           "sinks", "outliers", "recent", "vq", "dequant", "kernel", "relayout_ops_subbyte", "relayout_ops_byte",
           "expansion"]        # session 22: expansion (hqq: HQQ's dequant chain) added last


def _names(annotation) -> set[str]:
    return {a for a in typing.get_args(annotation) if isinstance(a, str)} | {
        n for a in typing.get_args(annotation) for n in _names(a)}


def test_every_dequant_and_kernel_name_of_the_schema_has_its_type():
    assert _names(KvCache.model_fields["dequant"].annotation) <= set(dequant.CHOICES)
    assert _names(TensorWeights.model_fields["dequant"].annotation) <= set(dequant.CHOICES)
    assert _names(TensorWeights.model_fields["kernel"].annotation) == set(dequant.KERNEL_FAMILIES)
    assert _names(IntKv.model_fields["element"].annotation | Fp8Kv.model_fields["element"].annotation
                  | VqKv.model_fields["element"].annotation) == set(CODES)


def test_the_dequant_types_say_what_each_choice_does():
    assert not dequant.of("native").expands and not dequant.of("none").expands
    assert dequant.of("software").on_sm and dequant.of("software").fused
    assert dequant.of("unfused").on_sm and not dequant.of("unfused").fused
    assert dequant.of("decoder").by_decoder and not dequant.of("decoder").on_sm
    assert dequant.family("fast").counted and not dequant.family("naive").counted
    assert dequant.family("native-decoder").is_dequant == "decoder" and dequant.family(None) is None


@pytest.mark.parametrize("kernel, way, ok", [("fast", "unfused", False), ("naive", "unfused", True),
                                             ("native-decoder", "software", False), ("fast", "software", True)])
def test_a_kernel_family_runs_under_its_own_dequant_ways(kernel, way, ok):
    if ok:
        assert kernel_dequant(kernel, way) == way
    else:
        with pytest.raises(ValueError, match=f"kernel {kernel}"):
            kernel_dequant(kernel, way)
    assert kernel_dequant("native-decoder", None) == "decoder"


@pytest.mark.parametrize("keys, kind", [({}, Bf16Kv), ({"preset": "bf16"}, Bf16Kv), ({"bits": 4}, IntKv),
                                        ({"preset": "fp8"}, Fp8Kv), ({"element": "vq", "bits": 2}, VqKv),
                                        ({"preset": "adaptive-2", "bits": 16}, IntKv),      # its sinks are 8-bit
                                        ({"bits": 16, "group_size": 128}, Bf16Kv)])         # a default: accepted
def test_the_kv_cache_kind_follows_from_its_widths_and_element(keys, kind):
    kv = kv_cache(keys)
    assert type(kv) is kind and kv.quantized == (kind is not Bf16Kv)
    assert list(kv.model_dump()) == KV_KEYS            # the resolved config: every key, in the old order


def test_the_codes_carry_their_storage_and_expansion():
    fp8, vq, int4 = (from_config(kv_cache(k)) for k in ({"preset": "fp8"}, {"element": "vq", "bits": 2}, {"bits": 4}))
    assert fp8.bits_per_element(1000) == 8 and fp8.dequant_ops_per_element(1000) == 2.0   # no scales; cvt pairs
    assert vq.codebook_bytes() == 256 * 4 * 2 and int4.codebook_bytes() == 0
    assert vq.dequant_ops_per_element(1000) == 0.5                                        # one lookup per 4 elements
    assert int4.dequant_ops_per_element(1000) == 4 + 0.5 + 4 + 2 + 15.5                   # kv_format's terms


def test_a_weights_class_resolves_over_the_model_default():
    fp8 = {"experts": TensorWeights(format="fp8", group_size=128, scale_format="fp32")}
    assert Weights().resolved("experts", fp8).format == "fp8" and Weights().resolved("attention", fp8) is None
    int4 = Weights(experts=TensorWeights(format="int4")).resolved("experts", fp8)
    assert (int4.format, int4.group_size, int4.dequant_choice) == ("int4", None, "software")   # fp8's group dropped
    assert Weights(kernel="native-decoder", format="int4").resolved("experts").dequant_choice == "decoder"


def test_every_weight_format_of_the_schema_is_a_type_that_says_what_it_stores():
    """Session 21: the weights' format is a type (config/weight_storage.py); the schema's names
    are its registry's, and the bytes and defaults are the schemes' own (docs/weights.md)."""
    from hwsim.config import weight_storage as ws
    from hwsim.model.weight_format import WeightFormat, decoder_takes, from_config

    assert _names(TensorWeights.model_fields["format"].annotation) == set(ws.FORMATS)
    assert _names(Weights.model_fields["format"].annotation) == set(ws.FORMATS)
    defaults = {n: (f.default_group, f.default_scale, f.has_zero) for n, f in ws.FORMATS.items()}
    assert defaults == {"bf16": (0, "bf16", False), "fp8": (0, "fp32", False), "int4": (128, "bf16", True),
                        "int3": (128, "bf16", True), "int2": (128, "bf16", True),
                        "mxfp4": (32, "e8m0", False), "nvfp4": (16, "fp8", False)}
    assert from_config(TensorWeights(format="int4")).bits_per_weight == 4 + 2 * 16 / 128
    assert from_config(TensorWeights(format="nvfp4")).bits_per_weight == 4 + 8 / 16
    assert TensorWeights(format="fp8").dequant_choice == "native"
    assert TensorWeights(format="int3").dequant_choice == "software"
    assert decoder_takes(["int4"], "mxfp4") and not decoder_takes(["int4"], "int2")
    # the tensor core takes fp8 as stored, fp4 only on a chip that multiplies it
    assert WeightFormat("fp8", dequant="native").tensor_dtype({"bf16", "fp8"}) == "fp8"
    assert WeightFormat("nvfp4", dequant="native").tensor_dtype({"bf16", "fp8"}) == "bf16"
    assert WeightFormat("nvfp4", dequant="native").tensor_dtype({"bf16", "fp4"}) == "fp4"
    assert WeightFormat("int4", dequant="software").tensor_dtype({"bf16", "fp8", "fp4"}) == "bf16"


def test_a_weight_format_asked_native_where_no_tensor_core_takes_it_is_one_problem_at_its_dequant():
    from types import SimpleNamespace

    from hwsim.model.weight_format import WeightFormat, WeightPlan, problems
    h200 = SimpleNamespace(name="h200", decoder=None, sm=SimpleNamespace(tensor_tflops={"bf16": 1, "fp8": 2}))
    plan = WeightPlan(experts=WeightFormat("int4", 128, dequant="native"),
                      attention=WeightFormat("mxfp4", 32, "e8m0", dequant="native"),
                      embeddings=WeightFormat("fp8", dequant="native"))
    assert problems(plan, h200) == [
        ("weights.experts.dequant", "no tensor core multiplies int4 weights natively: use dequant: software or decoder"),
        ("weights.attention.dequant", "profile 'h200' has no FP4 tensor rate: mxfp4 needs dequant: software "
                                      "(or decoder on a what-if chip)")]
    sram = SimpleNamespace(name="sram-chip", decoder=None, sm=SimpleNamespace(tensor_tflops={"bf16": 1}))
    assert problems(WeightPlan(experts=WeightFormat("fp8", dequant="native")), sram) == [
        ("weights.experts.dequant", "profile 'sram-chip' has no FP8 tensor rate")]
