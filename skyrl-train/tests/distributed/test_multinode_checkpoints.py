"""fsdp2 checkpoints on two nodes that do not share a checkpoint folder: refused without S3; with S3 every node's
shards reach S3 and a run on fresh machines resumes from there, on another world size, at the same data position.

Slow (~6 min on 2 cores): `pytest -m slow skyrl-train/tests/distributed/test_multinode_checkpoints.py`.

Two Ray nodes on this machine (`ray start --head` / `ray start --address`, free ports), 1 CPU each, so the 2 policy
ranks (PACK) land one per node. Each node has a checkpoint disk of its own: ``SKYRL_NODE_CKPT_PATH`` in the
environment of its `ray start`, as a node-local scratch disk would be, and the driver (the entrypoint, connected
with ``RAY_ADDRESS``) keeps ``trainer.ckpt_path`` on a third folder. The S3 server is moto's, over HTTP.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys

import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.checkpoints import LATEST_CKPT_FILE
from skyrl_train.distributed.checkpoint_storage import NODE_CKPT_PATH_ENV
from skyrl_train.storage.rank_uploads import RANK_UPLOADS_FILE
from skyrl_train.testing import TINY_RUN_OVERRIDES
from skyrl_train.testing.ray import TEST_ENV, ray_nodes, subprocess_env
from skyrl_train.testing.s3 import complete_steps, s3_client, s3_env
from skyrl_train.training_batch import TrainingInputBatch

pytestmark = pytest.mark.slow

STEPS = 3
KILLING_LAUNCHER = """
import os, signal, sys
from skyrl_train.entrypoints import main_base
from skyrl_train.storage.s3 import S3Store

puts = []
put = S3Store._put

def killing_put(self, key, open_body, what):
    if "/global_step_2/" in key:  # the driver's upload of step 2 (the ranks upload from their own processes)
        puts.append(key)
        if len(puts) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    return put(self, key, open_body, what)

S3Store._put = killing_put
sys.exit(main_base.main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def nodes(tmp_path_factory, s3_server):
    """(GCS address, {node name: its checkpoint root}) of two nodes with their own checkpoint roots."""
    roots = {name: tmp_path_factory.mktemp(f"node_{name}") for name in ("a", "b")}
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        for key, value in TEST_ENV.items():
            monkeypatch.setenv(key, value)
        envs = [{NODE_CKPT_PATH_ENV: str(root), **s3_env(s3_server)} for root in roots.values()]
        with ray_nodes(envs, num_cpus=1, num_gpus=0, connect=False) as address:
            yield address, roots


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_dataset(generate_dataset(train_size=4 * STEPS, val_size=0, seed=11, few_shot=0), folder)
    return folder


def train(address, run_dir, data_dir, model_path, *extra, ranks=2, launcher=None):
    overrides = [
        "trainer.strategy=fsdp2",
        "trainer.placement.colocate_all=false",
        f"trainer.placement.policy_num_gpus_per_node={ranks}",
        f"data.train_data=[{data_dir / 'train.parquet'}]",
        "data.val_data=[]",
        f"trainer.policy.model.path={model_path}",
        *TINY_RUN_OVERRIDES,
        "trainer.policy.model.lora.rank=4",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.eval_interval=-1",
        "trainer.ckpt_interval=1",
        "trainer.dump_data_batch=true",
        "trainer.logger=jsonl",
        f"trainer.ckpt_path={run_dir / 'ckpts'}",
        f"trainer.export_path={run_dir / 'exports'}",
        "trainer.resume_mode=latest",
        "trainer.project_name=proj",
        "trainer.run_name=run1",
        *extra,
    ]
    program = ["-c", launcher] if launcher else ["-m", "skyrl_train.entrypoints.main_base"]
    result = subprocess.run(
        [sys.executable, *program, *overrides],
        env=subprocess_env(RAY_ADDRESS=address),
        capture_output=True,
        text=True,
        timeout=900,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "stderr.log").write_text(result.stderr)  # the whole log, for a failure (assertions show its end)
    return result


def s3_overrides(endpoint, bucket):
    return [
        f"trainer.s3.bucket={bucket}",
        f"trainer.s3.endpoint_url={endpoint}",
        "trainer.s3.keep_local=1",
        "trainer.s3.keep_remote=3",
    ]


def manifest_paths(endpoint, bucket, step):
    body = s3_client(endpoint).get_object(Bucket=bucket, Key=f"proj/run1/global_step_{step}/MANIFEST.json")["Body"]
    return sorted(entry["path"] for entry in json.loads(body.read())["files"])


def files_below(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def step_uids(run_dir, step):
    dump = run_dir / "exports" / "dumped_data" / f"global_step_{step}_training_input.pkl"
    return TrainingInputBatch.load(dump).metadata["uids"]


def test_without_s3_a_run_whose_nodes_do_not_share_ckpt_path_is_refused_at_start(nodes, tmp_path, data_dir, tiny_model):
    address, roots = nodes
    refused = train(address, tmp_path / "driver", data_dir, tiny_model)
    assert refused.returncode == 1, refused.stderr[-3000:]
    stopped = [line for line in refused.stderr.splitlines() if line.startswith("Stopped: ")]
    assert len(stopped) == 1, refused.stderr[-3000:]
    assert stopped[0].startswith("Stopped: trainer.strategy=fsdp2: the policy ranks rank 0 (")
    named = re.findall(r"rank (\d) \([^:]+:([^)]+)\)", stopped[0])  # rank (node ip:its checkpoint root)
    assert sorted(rank for rank, _ in named) == ["0", "1"]
    assert sorted(root for _, root in named) == sorted(str(root) for root in roots.values())  # one rank per node
    assert f"do not see trainer.ckpt_path='{tmp_path / 'driver' / 'ckpts'}' as the driver does" in stopped[0]
    assert "turn S3 on (trainer.s3.bucket or S3_CHECKPOINT_BUCKET)" in stopped[0]
    assert "fsdp2 workers ready" not in refused.stderr  # refused before any model was built


def test_with_s3_every_node_uploads_its_shards_and_fresh_machines_resume_on_one_rank(
    nodes, tmp_path, data_dir, tiny_model, s3_server, s3_bucket
):
    address, roots = nodes
    s3 = s3_overrides(s3_server, s3_bucket)
    killed = train(address, tmp_path / "vm1", data_dir, tiny_model, *s3, launcher=KILLING_LAUNCHER)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "policy ranks [0, 1] do not share trainer.ckpt_path with the driver" in killed.stderr
    # step 2 holds the ranks' files and one driver file, but no manifest
    assert complete_steps(s3_server, s3_bucket, "proj/run1") == [1]
    step_1 = manifest_paths(s3_server, s3_bucket, 1)
    for shard in ("policy/model_optim/.metadata", "policy/model_optim/__0_0.distcp", "policy/model_optim/__1_0.distcp"):
        assert shard in step_1
    assert {"policy/extra_state.pt", f"policy/{RANK_UPLOADS_FILE}", "data.pt", "trainer_state.pt"} <= set(step_1)
    assert files_below(tmp_path / "vm1" / "ckpts" / "global_step_1" / "policy") == [RANK_UPLOADS_FILE]
    for root in roots.values():  # each node deleted its shards once they were in S3
        assert files_below(root) == []

    shutil.rmtree(tmp_path / "vm1" / "ckpts")  # fresh machines: no local checkpoint anywhere
    for root in roots.values():
        shutil.rmtree(root)
        root.mkdir()
    resumed = train(address, tmp_path / "vm2", data_dir, tiny_model, *s3, ranks=1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"downloaded checkpoint global_step_1 from s3://{s3_bucket}/proj/run1/global_step_1/" in resumed.stderr
    assert "global_step_1 at step 1" in resumed.stderr  # 2 ranks' shards loaded by 1 rank (DCP reshards)
    assert complete_steps(s3_server, s3_bucket, "proj/run1") == [1, 2, 3]
    assert "policy/model_optim/__0_0.distcp" in manifest_paths(s3_server, s3_bucket, 3)
    assert step_uids(tmp_path / "vm2", 2) == step_uids(tmp_path / "vm1", 2)  # the same data position
    ckpts = tmp_path / "vm2" / "ckpts"
    assert (ckpts / LATEST_CKPT_FILE).read_text() == "3\n"
    for root in roots.values():  # downloaded shards are removed after the load, written ones after the upload
        assert files_below(root) == []
