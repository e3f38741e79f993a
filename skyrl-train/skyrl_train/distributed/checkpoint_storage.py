"""Where the ranks of an fsdp2 worker group keep their checkpoint files: one filesystem with the driver, or one per
node with S3 in between.

Each rank writes its own DCP shard while the driver writes the rest of the checkpoint (``trainer_state.pt``,
``data.pt``) and commits it (``CheckpointManager``). That works only if the ranks write where the driver commits. So
at start-up ``probe_checkpoint_storage`` writes a probe file under the driver's ``trainer.ckpt_path`` and every rank
looks for it, and for the other ranks' probes, under its own checkpoint root (``node_ckpt_root``):

- every rank sees the driver's probe (one machine, or one filesystem mounted at ``trainer.ckpt_path`` on every
  node): **shared**. Ranks write into the folder the driver gives them, as on one machine;
- some rank does not, and S3 is on: **per node**. Ranks write into a scratch folder under their node's root; after
  the save, one rank per scratch folder (the lowest rank that sees it: the leader) uploads its files to the step's
  S3 prefix (``{run_prefix}/global_step_N/{role}/``), checks each object's size and deletes the scratch folder;
  the driver writes what they uploaded into ``{role}/UPLOADED_BY_RANKS.json``
  (``skyrl_train.storage.rank_uploads``) before the step is committed, and the S3 sink writes the step's
  manifest last, listing those files too. A resume downloads the listed files onto every node (one leader per
  scratch folder, every file checked against its sha256), loads them (DCP reshards to another world size) and
  deletes them, so it works on a fresh set of machines;
- some rank does not, and S3 is off: the run is refused at start (``CheckpointError`` naming the ranks and their
  nodes): the shards would be spread over machines and no one could resume the checkpoint.

A node's checkpoint root is ``trainer.ckpt_path`` on that node, unless ``SKYRL_NODE_CKPT_PATH`` is set in the
environment of that node's Ray (``ray start``): e.g. a local NVMe scratch disk mounted elsewhere than
``trainer.ckpt_path``. (The tests set it to give two Ray nodes on one machine separate disks.)
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from skyrl_train.checkpoints.manager import CheckpointError
from skyrl_train.storage.rank_uploads import RankUploads
from skyrl_train.utils.fs import remove_tree

if TYPE_CHECKING:
    from skyrl_train.distributed.actor_group import ActorGroup
    from skyrl_train.storage import ManifestEntry, S3Settings

__all__ = [
    "DRIVER_PROBE",
    "NODE_CKPT_PATH_ENV",
    "RankStorage",
    "StorageLayout",
    "node_ckpt_root",
    "plan_storage",
    "probe_checkpoint_storage",
]

logger = logging.getLogger(__name__)

NODE_CKPT_PATH_ENV = "SKYRL_NODE_CKPT_PATH"
DRIVER_PROBE = "driver"


def node_ckpt_root(ckpt_path: str) -> Path:
    """This node's checkpoint root: ``$SKYRL_NODE_CKPT_PATH``, else ``ckpt_path`` (``~`` expanded here)."""
    return Path(os.environ.get(NODE_CKPT_PATH_ENV) or ckpt_path).expanduser()


def rank_probe(rank: int) -> str:
    return f"rank-{rank}"


@dataclass(frozen=True)
class StorageLayout:
    """What the probe found: ``shared`` (every rank sees the driver's folder), the ranks that do not (``blind``),
    and per rank whether it is the leader of the ranks that see its folder."""

    shared: bool
    blind: tuple[int, ...]
    leaders: tuple[bool, ...]


def plan_storage(seen: list[set[str]]) -> StorageLayout:
    """The layout from the probe names each rank found under its root (``seen[r]``, which includes its own)."""
    blind = tuple(rank for rank, names in enumerate(seen) if DRIVER_PROBE not in names)
    leaders = []
    for rank, names in enumerate(seen):
        visible = [int(name.removeprefix("rank-")) for name in names if name.startswith("rank-")]
        leaders.append(rank == min(visible, default=rank))
    return StorageLayout(shared=not blind, blind=blind, leaders=tuple(leaders))


@dataclass(frozen=True)
class RankStorage:
    """Where one rank writes and reads its checkpoint files (built by ``probe_checkpoint_storage``).

    ``s3`` is None when the ranks share the driver's folder; else the files go through S3 (per node).
    """

    ckpt_path: str
    """``trainer.ckpt_path`` as configured; each rank resolves it on its own node (``node_ckpt_root``)."""
    driver_root: str
    s3: S3Settings | None
    leader: bool
    scratch: str
    """Per node: this group's scratch folder, relative to the node's root."""

    def folder(self, folder: str | Path) -> Path:
        """Shared: where this rank finds the driver's ``folder`` (the same place, under this node's root)."""
        folder, driver_root = Path(folder), Path(self.driver_root)
        return (
            node_ckpt_root(self.ckpt_path) / folder.relative_to(driver_root)
            if folder.is_relative_to(driver_root)
            else folder
        )

    def scratch_folder(self, purpose: str) -> Path:
        """Per node: ``{node root}/{scratch}/{purpose}`` (``save`` or ``load``)."""
        return node_ckpt_root(self.ckpt_path) / self.scratch / purpose

    def clear_scratch(self) -> None:
        """Remove what a killed run left in this group's scratch folder (the leader, before any save or load)."""
        remove_tree(node_ckpt_root(self.ckpt_path) / self.scratch)

    def upload(self, local: Path, prefix: str) -> list[ManifestEntry]:
        """Upload ``local``'s files to ``prefix`` in the checkpoint bucket (sizes checked), then delete them."""
        try:
            return list(self.s3.store().upload_files(local, prefix).files)
        finally:
            remove_tree(local)

    def download(self, source: RankUploads, local: Path) -> None:
        """Download ``source``'s files into a fresh ``local`` (each checked against its size and sha256)."""
        remove_tree(local)
        local.mkdir(parents=True)
        self.s3.store(source.bucket).download_files(source.prefix, source.files, local)


def probe_checkpoint_storage(
    group: ActorGroup, ckpt_path: str, s3: S3Settings | None, role: str, run_name: str
) -> list[RankStorage]:
    """Find out whether every rank of ``group`` sees the driver's ``trainer.ckpt_path`` (see the module docstring) and
    return each rank's ``RankStorage``.

    Raises:
        CheckpointError: some ranks do not see it and S3 is off (names the ranks, their nodes and the two fixes).
    """
    driver_root = Path(ckpt_path).expanduser()
    probe = f".skyrl-probe-{uuid.uuid4().hex}"
    (driver_root / probe).mkdir(parents=True)
    (driver_root / probe / DRIVER_PROBE).touch()
    try:
        where = group.run("write_checkpoint_probe", ckpt_path, probe)
        seen = [set(names) for names in group.run("read_checkpoint_probe", ckpt_path, probe)]
    finally:
        group.run("remove_checkpoint_probe", ckpt_path, probe)
        shutil.rmtree(driver_root / probe, ignore_errors=True)
    layout = plan_storage(seen)
    if not layout.shared and s3 is None:
        ranks = ", ".join(f"rank {rank} ({where[rank]})" for rank in layout.blind)
        raise CheckpointError(
            f"trainer.strategy=fsdp2: the {role} ranks {ranks} do not see trainer.ckpt_path={ckpt_path!r} as the "
            f"driver does ({driver_root}): each rank writes its own checkpoint shard, so a checkpoint would be spread "
            "over machines and could not be resumed. Mount one filesystem at trainer.ckpt_path on every node, or "
            "turn S3 on (trainer.s3.bucket or S3_CHECKPOINT_BUCKET): every node then uploads its own shards"
        )
    if not layout.shared:
        logger.info(
            "%s ranks %s do not share trainer.ckpt_path with the driver: their checkpoint files go through S3",
            role,
            list(layout.blind),
        )
    scratch = f".rank-scratch/{run_name}/{role}"
    return [
        RankStorage(ckpt_path, str(driver_root), None if layout.shared else s3, leader, scratch)
        for leader in layout.leaders
    ]


def write_probe(ckpt_path: str, probe: str, rank: int) -> str:
    """(On a rank) write this rank's probe under its node's root; returns ``node ip:root`` for messages."""
    import ray

    folder = node_ckpt_root(ckpt_path) / probe
    folder.mkdir(parents=True, exist_ok=True)
    (folder / rank_probe(rank)).touch()
    return f"{ray.util.get_node_ip_address()}:{node_ckpt_root(ckpt_path)}"


def read_probe(ckpt_path: str, probe: str) -> list[str]:
    """(On a rank) the probe names visible under this node's root."""
    return sorted(os.listdir(node_ckpt_root(ckpt_path) / probe))


def remove_probe(ckpt_path: str, probe: str) -> None:
    shutil.rmtree(node_ckpt_root(ckpt_path) / probe, ignore_errors=True)
