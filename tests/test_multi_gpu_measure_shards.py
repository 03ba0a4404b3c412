"""The shard models that `measure_ep_steps.py --solo` rows are predicted with are the shards
hwsim itself runs on each GPU of the layout (hwsim.parallel.layout.shard_model)."""

from pathlib import Path

import pytest

from hwsim.config.load import load_model
from hwsim.parallel.layout import Layout, shard_model

SHARDS = Path(__file__).resolve().parent.parent / "validation" / "shards"


@pytest.mark.parametrize("path", sorted(SHARDS.glob("*-tp*.yaml")), ids=lambda p: p.stem)
def test_a_shard_file_is_the_layout_s_shard(path):
    model_name, tp = path.stem.rsplit("-tp", 1)
    tp = int(tp)
    want = shard_model(load_model(model_name), Layout(gpus=tp, tp=tp, ep=1, gpus_per_node=8, dp_attention=False))
    got = load_model(str(path))
    assert (got.layers, got.hidden, got.vocab) == (want.layers, want.hidden, want.vocab)
    assert got.attention == want.attention
    assert got.moe == want.moe
