"""Where fsdp2 ranks keep checkpoint files: the probe's verdict (``plan_storage``), a node's root, and the step a
rank's upload is named after. The runs on two nodes are in ``test_multinode_checkpoints.py`` (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_train.checkpoints.manager import written_step
from skyrl_train.distributed.checkpoint_storage import (
    DRIVER_PROBE,
    NODE_CKPT_PATH_ENV,
    RankStorage,
    StorageLayout,
    node_ckpt_root,
    plan_storage,
)


def test_ranks_that_all_see_the_driver_probe_share_its_folder():
    seen = [{DRIVER_PROBE, "rank-0", "rank-1"}, {DRIVER_PROBE, "rank-0", "rank-1"}]
    assert plan_storage(seen) == StorageLayout(shared=True, blind=(), leaders=(True, False))


def test_each_folder_the_driver_cannot_see_gets_its_lowest_rank_as_leader():
    # ranks 0-1 on the driver's node, ranks 2-3 on a node with its own disk, rank 4 alone on a third
    on_driver = {DRIVER_PROBE, "rank-0", "rank-1"}
    second = {"rank-2", "rank-3"}
    seen = [on_driver, on_driver, second, second, {"rank-4"}]
    assert plan_storage(seen) == StorageLayout(shared=False, blind=(2, 3, 4), leaders=(True, False, True, False, True))


def test_a_node_root_is_its_own_setting_else_ckpt_path(monkeypatch, tmp_path):
    monkeypatch.delenv(NODE_CKPT_PATH_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert node_ckpt_root("~/ckpts") == tmp_path / "ckpts"
    monkeypatch.setenv(NODE_CKPT_PATH_ENV, "/mnt/nvme/ckpts")
    assert node_ckpt_root("~/ckpts") == Path("/mnt/nvme/ckpts")


def test_a_shared_rank_finds_the_driver_folder_under_its_own_root(monkeypatch):
    monkeypatch.setenv(NODE_CKPT_PATH_ENV, "/shared/mount")
    storage = RankStorage("/driver/ckpts", "/driver/ckpts", None, True, ".rank-scratch/run/policy")
    assert storage.folder("/driver/ckpts/.global_step_3.partial-42/policy") == Path(
        "/shared/mount/.global_step_3.partial-42/policy"
    )
    assert storage.folder("/elsewhere/ckpt") == Path("/elsewhere/ckpt")  # not under ckpt_path: as given
    assert storage.scratch_folder("save") == Path("/shared/mount/.rank-scratch/run/policy/save")


@pytest.mark.parametrize(
    ("name", "step"),
    [("global_step_12", 12), (".global_step_12.partial-4242", 12), (".global_step_12.retired-1-ab", None), ("x", None)],
)
def test_the_step_of_a_folder_being_written(name, step):
    assert written_step(Path("/ckpts") / name) == step
