"""`shard_model` on 2 gloo processes (torch.multiprocessing, no Ray): what `fsdp_config.fsdp_size` and `reshard_after_forward` change.

The tiny model has a 49152 x 64 embedding (the first parameter of the root FSDP group) and 2 decoder layers.
"""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from skyrl_train.distributed.fsdp import FSDPSetup, shard_model
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import tiny_model_path

VOCAB = 49152


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _probe(rank: int, port: int, model_path: str, fsdp_size: int, reshard: bool, out: dict) -> None:
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = load_causal_lm(model_path)
        config = SimpleNamespace(reshard_after_forward=reshard, fsdp_size=fsdp_size)
        shard_model(model, FSDPSetup(config, "cpu", bf16=False, role="policy"))
        embedding = model.model.embed_tokens.weight
        layer_weight = lambda: model.model.layers[0].self_attn.q_proj.weight  # noqa: E731 (re-read after forward)
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]]))
        out[rank] = {
            "mesh_shape": tuple(embedding.device_mesh.shape),
            "local_rows": embedding.to_local().shape[0],
            "layer_sharded_after_forward": isinstance(layer_weight(), DTensor),
        }
    finally:
        dist.destroy_process_group()


def shard_on_two_ranks(fsdp_size: int, reshard: bool) -> dict:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_probe, args=(_free_port(), tiny_model_path(), fsdp_size, reshard, out), nprocs=2)
        return dict(out)


@pytest.mark.slow  # two spawned processes per case: ~20 s each on an idle 2-core machine, more under load
@pytest.mark.parametrize(
    ("fsdp_size", "reshard", "expected"),
    [
        (-1, True, {"mesh_shape": (2,), "local_rows": VOCAB // 2, "layer_sharded_after_forward": True}),
        (1, False, {"mesh_shape": (2, 1), "local_rows": VOCAB, "layer_sharded_after_forward": False}),
    ],
    ids=["full-shard-reshard", "hsdp-keep-gathered"],
)
def test_fsdp_size_and_reshard_after_forward_decide_the_layout(fsdp_size, reshard, expected):
    """-1 halves every weight over the 2 ranks; 1 keeps whole weights per rank on a [replicate 2, shard 1] mesh.
    Without resharding, a block's weights stay gathered (plain tensors) after its forward."""
    assert shard_on_two_ranks(fsdp_size, reshard) == {0: expected, 1: expected}


def test_an_fsdp_size_that_does_not_divide_the_world_names_the_key():
    config = SimpleNamespace(reshard_after_forward=True, fsdp_size=3)
    with pytest.raises(ValueError, match="trainer.critic.fsdp_config.fsdp_size=3 must be -1 or a positive divisor"):
        _build_mesh_on_one_rank(FSDPSetup(config, "cpu", bf16=False, role="critic"))


def _build_mesh_on_one_rank(setup: FSDPSetup) -> None:
    from skyrl_train.distributed.fsdp import build_device_mesh

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        build_device_mesh(setup.fsdp_size, setup.device, setup.role)
    finally:
        dist.destroy_process_group()
