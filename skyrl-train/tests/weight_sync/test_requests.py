"""Weight-update requests and init info: JSON round trips, validation, offsets, chunking and the mode rules."""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config import load_config
from skyrl_train.weight_sync import (
    BroadcastWeightUpdateRequest,
    CudaIpcWeightUpdateRequest,
    LoraLoadRequest,
    WeightSyncInitInfo,
    WeightUpdateRequest,
    override_existing_update_group,
    transfer_mode,
)
from skyrl_train.weight_sync.sender import chunked


def test_a_broadcast_request_describes_its_tensors_in_order_and_round_trips_through_json():
    tensors = {"b.weight": torch.zeros(2, 3, dtype=torch.bfloat16), "a.bias": torch.zeros(4)}
    request = BroadcastWeightUpdateRequest.for_tensors(tensors, weight_version=5)
    data = request.to_json()
    assert data == {
        "type": "broadcast",
        "names": ["b.weight", "a.bias"],
        "dtypes": ["bfloat16", "float32"],
        "shapes": [[2, 3], [4]],
        "weight_version": 5,
    }
    assert WeightUpdateRequest.from_json(data) == request
    assert (len(request), request.numel()) == (2, 10)


def test_lora_and_version_only_requests_round_trip_through_json():
    lora = LoraLoadRequest(lora_path="/tmp/sync/weight_version_3", weight_version=3)
    assert lora.to_json() == {
        "type": "lora",
        "names": [],
        "dtypes": [],
        "shapes": [],
        "weight_version": 3,
        "lora_path": "/tmp/sync/weight_version_3",
    }
    assert WeightUpdateRequest.from_json(lora.to_json()) == lora
    version_only = WeightUpdateRequest(weight_version=2)
    assert WeightUpdateRequest.from_json(version_only.to_json()) == version_only
    assert type(WeightUpdateRequest.from_json({"weight_version": 1})) is WeightUpdateRequest


def test_a_cuda_ipc_request_carries_one_handle_per_gpu_as_text_in_its_in_job_form_only():
    request = CudaIpcWeightUpdateRequest(
        names=["w", "step"],
        dtypes=["bfloat16", "int64"],
        shapes=[[3], []],
        offsets=[0, 256],
        ipc_handles={"GPU-0": ("rebuild", (0, 1)), "GPU-1": ("rebuild", (1, 2)), "GPU-2": ("rebuild", (2, 3))},
    )
    data = request.to_rpc()
    assert sorted(data["ipc_handles"]) == ["GPU-0", "GPU-1", "GPU-2"]
    assert all(isinstance(text, str) for text in data["ipc_handles"].values())
    assert data["offsets"] == [0, 256]
    assert WeightUpdateRequest.from_rpc(data) == request
    with pytest.raises(TypeError, match="'cuda_ipc' weight-update request has no JSON form"):
        request.to_json()
    with pytest.raises(ValueError, match="'cuda_ipc' weight-update request has no JSON form"):
        WeightUpdateRequest.from_json(data)  # what an HTTP body would carry: its handles are never unpickled


def test_the_in_job_form_of_a_json_request_is_its_json_form():
    request = BroadcastWeightUpdateRequest(names=["w"], dtypes=["float32"], shapes=[[2]], weight_version=1)
    assert request.to_rpc() == request.to_json()
    assert WeightUpdateRequest.from_rpc(request.to_rpc()) == request


def test_a_cuda_ipc_offset_that_is_not_a_multiple_of_the_element_size_is_refused():
    with pytest.raises(ValueError, match="step: byte offset 6 .* int64 element size 8"):
        CudaIpcWeightUpdateRequest(names=["w", "step"], dtypes=["bfloat16", "int64"], shapes=[[3], []], offsets=[0, 6])


@pytest.mark.parametrize(
    "data, message",
    [
        ({"type": "nccl_magic"}, "unknown weight-update request type 'nccl_magic'"),
        ({"type": "lora", "lora_path": "/a", "rank": 4}, r"unknown field\(s\) \['rank'\]"),
        ({"type": "broadcast", "names": ["a", "b"], "dtypes": ["float32"], "shapes": [[1], [1]]}, "2 names, 1 dtypes"),
        ({"type": "lora"}, "needs lora_path"),
        ({"type": "lora", "lora_path": "/a", "names": ["x"], "dtypes": ["float32"], "shapes": [[1]]}, "no tensors"),
        ({"type": "broadcast", "names": [1], "dtypes": ["float32"], "shapes": [[1]]}, "names .* list of strings"),
        ({"type": "broadcast", "names": ["a"], "dtypes": ["nn"], "shapes": [[1]]}, "dtypes .* torch dtype names"),
        ({"type": "broadcast", "names": ["a"], "dtypes": ["float32"], "shapes": [[-1]]}, "shapes .* non-negative"),
        ({"type": "broadcast", "names": ["a"], "dtypes": ["float32"], "shapes": [["1"]]}, "shapes .* integers"),
        ({"type": "lora", "lora_path": ["/a"]}, "lora_path .* a string"),
        ({"weight_version": "3"}, "weight_version .* an integer"),
        ([1, 2], "is a JSON object, got list"),
    ],
)
def test_a_malformed_request_is_refused_naming_what_is_wrong(data, message):
    with pytest.raises(ValueError, match=message):
        WeightUpdateRequest.from_json(data)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"type": "cuda_ipc", "names": ["x"], "dtypes": ["float32"], "shapes": [[1]]}, "1 names, 0 offsets"),
        ({"type": "cuda_ipc", "names": ["x"], "dtypes": ["float32"], "shapes": [[1]], "sizes": [4]}, "'sizes'"),
    ],
)
def test_a_malformed_in_job_request_is_refused_naming_what_is_wrong(data, message):
    with pytest.raises(ValueError, match=message):
        WeightUpdateRequest.from_rpc(data)


def test_each_engine_gets_its_own_rank_offset_in_the_group():
    info = WeightSyncInitInfo.for_engines("10.0.0.1", 29500, engine_ranks=4, backend="gloo")
    assert info.world_size == 5
    assert [info.for_engine(i, 2).rank_offset for i in range(2)] == [1, 3]
    assert WeightSyncInitInfo.from_json(info.for_engine(1, 2).to_json()) == info.for_engine(1, 2)
    with pytest.raises(ValueError, match="does not fit"):
        info.for_engine(2, 2)
    with pytest.raises(ValueError, match="'gloo' or 'nccl'"):
        WeightSyncInitInfo("h", 1, 2, backend="mpi")


@pytest.mark.parametrize(
    "data, message",
    [
        ({"master_addr": "h", "master_port": "1", "world_size": 2}, "master_port .* JSON type integer"),
        ({"master_addr": "h", "master_port": 1, "world_size": True}, "world_size .* JSON type integer"),
        ({"master_addr": "h", "master_port": 1, "world_size": 2, "override_existing": 1}, "JSON type boolean"),
        ({"master_addr": "h", "master_port": 1, "world_size": 2, "timeout_s": "5"}, "timeout_s .* JSON type number"),
        ("h:1", "is a JSON object, got str"),
    ],
)
def test_init_info_of_the_wrong_json_types_is_refused(data, message):
    with pytest.raises(ValueError, match=message):
        WeightSyncInitInfo.from_json(data)


def test_weights_are_cut_into_chunks_of_at_most_the_byte_budget_in_order():
    state = {"a": torch.zeros(10), "b": torch.zeros(10), "c": torch.zeros(30), "d": torch.zeros(5)}  # 40/40/120/20 B
    assert [list(chunk) for chunk in chunked(state, 80)] == [["a", "b"], ["c"], ["d"]]


@pytest.mark.parametrize(
    "overrides, shares, mode",
    [
        ([], True, "shared"),
        (["trainer.policy.model.lora.rank=8"], False, "lora"),
        (["generator.weight_sync_backend=gloo"], False, "broadcast"),
        (["generator.run_engines_locally=false", "generator.weight_sync_backend=gloo"], False, "broadcast"),
        (["generator.run_engines_locally=false"], False, "broadcast"),  # remote engines are never colocated
        (["generator.backend=vllm"], False, "cuda_ipc"),  # nccl, vLLM engines colocated on the policy's GPUs
        (["generator.backend=vllm", "trainer.placement.colocate_all=false"], False, "broadcast"),  # GPUs of their own
        (
            ["generator.backend=vllm", "trainer.placement.colocate_all=false", "generator.weight_sync_backend=gloo"],
            False,
            "broadcast",
        ),
    ],
)
def test_the_sync_mode_follows_upstream_rules(overrides, shares, mode, tmp_path):
    cfg = _config(tmp_path, overrides)
    assert transfer_mode(cfg, engine_shares_policy=shares) == mode


def test_override_existing_update_group_auto_is_on_for_remote_engines_only(tmp_path):
    assert override_existing_update_group(_config(tmp_path, [])) is False
    assert override_existing_update_group(_config(tmp_path, ["generator.run_engines_locally=false"])) is True
    assert override_existing_update_group(_config(tmp_path, ["generator.override_existing_update_group=enable"]))


def _config(tmp_path, overrides):
    data = tmp_path / "train.parquet"
    return load_config(["trainer.policy.model.path=tiny", f"data.train_data=[{data}]", *overrides], validate=False)
