"""A placement group the cluster cannot hold fails after a timeout, naming what was asked and what the cluster has, and
is removed: for any group (`reserve_placement_group`), the fsdp2 workers' groups and a vLLM engine's own group.

On a real local Ray cluster with 2 CPUs and no GPU (whatever the machine has), so a GPU bundle can never be held.
"""

from __future__ import annotations

import pytest
from ray.util.placement_group import placement_group_table, remove_placement_group

import skyrl_train.utils.ray_placement
from skyrl_train.config import load_config
from skyrl_train.config.schema import PlacementConfig
from skyrl_train.distributed.placement import create_placement_groups, plan_placement
from skyrl_train.testing import tiny_model_path
from skyrl_train.testing.ray import local_cluster
from skyrl_train.utils.ray_placement import reserve_placement_group

TIMEOUT_S = 2.0


@pytest.fixture(scope="module", autouse=True)
def two_cpus_no_gpu():
    with local_cluster(num_cpus=2, num_gpus=0):
        yield


def pending_or_created_groups() -> list[str]:
    return [group["state"] for group in placement_group_table().values() if group["state"] != "REMOVED"]


@pytest.mark.timeout(60)  # a wait without a deadline fails here instead of hanging
def test_a_gpu_bundle_on_a_cluster_without_gpus_fails_with_what_was_asked_and_what_the_cluster_has():
    with pytest.raises(TimeoutError) as failure:
        reserve_placement_group([{"GPU": 1.0, "CPU": 1.0}], purpose="a test", remedy="Add a GPU.", timeout_s=TIMEOUT_S)
    assert str(failure.value) == (
        "the Ray cluster could not reserve 1 bundle of {'GPU': 1.0, 'CPU': 1.0} (1 GPU, 1 CPU in all) for a test "
        "within 2 s; the cluster has 0 GPUs (0 available), 2 CPUs (2 available). Add a GPU."
    )
    assert pending_or_created_groups() == []


def test_a_group_the_cluster_can_hold_is_returned_created():
    group = reserve_placement_group([{"CPU": 1.0}] * 2, purpose="a test", remedy="-", timeout_s=TIMEOUT_S)
    try:
        assert placement_group_table(group)["state"] == "CREATED"
    finally:
        remove_placement_group(group)


@pytest.mark.timeout(60)
def test_fsdp2_gpu_workers_on_a_cluster_without_gpus_fail_and_keep_nothing_reserved():
    cfg = PlacementConfig(colocate_all=False, colocate_policy_ref=True, policy_num_gpus_per_node=2)
    cfg.ref_num_gpus_per_node = 2
    with pytest.raises(TimeoutError) as failure:
        create_placement_groups(plan_placement(cfg, ["policy", "ref"], use_gpu=True), timeout_s=TIMEOUT_S)
    assert str(failure.value) == (
        "the Ray cluster could not reserve 2 bundles of {'GPU': 1.0, 'CPU': 1.0} (2 GPUs, 2 CPUs in all) for the "
        "fsdp2 policy / ref workers within 2 s; the cluster has 0 GPUs (0 available), 2 CPUs (2 available). "
        "Lower trainer.placement.* or add nodes."
    )
    assert pending_or_created_groups() == []


@pytest.mark.timeout(60)
def test_a_vllm_engine_larger_than_the_cluster_fails_and_keeps_nothing_reserved(monkeypatch):
    """Tensor parallel 4 on CPU asks one bundle of 4 CPUs. No vLLM needed: the engine actor is never started."""
    from skyrl_train.inference_engines.vllm.ray_engine import create_vllm_engines

    monkeypatch.setattr(skyrl_train.utils.ray_placement, "PLACEMENT_TIMEOUT_S", TIMEOUT_S)
    cfg = load_config(
        [
            f"trainer.policy.model.path={tiny_model_path()}",
            "generator.backend=vllm",
            "trainer.placement.colocate_all=false",
            "generator.num_inference_engines=1",
            "generator.inference_engine_tensor_parallel_size=4",
        ],
        validate=False,
    )
    with pytest.raises(TimeoutError) as failure:
        create_vllm_engines(cfg, tokenizer=None)
    assert str(failure.value) == (
        "the Ray cluster could not reserve 1 bundle of {'CPU': 4.0} (4 CPUs in all) for vLLM engine 0 (of "
        "generator.num_inference_engines=1) within 2 s; the cluster has 2 CPUs (2 available). Lower "
        "generator.num_inference_engines or generator.inference_engine_tensor_parallel_size, or add nodes."
    )
    assert pending_or_created_groups() == []
