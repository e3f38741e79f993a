"""A training run with S3 on, killed with SIGKILL in the middle of a checkpoint upload, resumes on a machine
without its local checkpoints from the newest checkpoint complete in S3, and finishes; eval dumps land in S3.

The launcher wraps the real entrypoint; it only decides *when* the process kills itself: just before the second
object of step 2's checkpoint is uploaded, so S3 holds part of step 2 and no manifest for it.

With ``trainer.strategy=fsdp2`` (slow) the checkpoints are sharded by 2 gloo ranks and every rank's shard reaches S3.
"""

import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.checkpoints import LATEST_CKPT_FILE
from skyrl_train.config.schema import DISTRIBUTED_STRATEGIES
from skyrl_train.testing import TINY_RUN_OVERRIDES
from skyrl_train.testing.ray import fsdp2_overrides, subprocess_env
from skyrl_train.testing.s3 import complete_steps, s3_keys

LAUNCHER = textwrap.dedent("""
    import os, signal, sys
    from skyrl_train.entrypoints import main_base
    from skyrl_train.storage.s3 import S3Store

    kill_step = os.environ.get("KILL_DURING_UPLOAD_OF")
    step_puts = []
    put = S3Store._put

    def killing_put(self, key, open_body, what):
        if kill_step and f"/global_step_{kill_step}/" in key:
            step_puts.append(key)
            if len(step_puts) == 2:
                os.kill(os.getpid(), signal.SIGKILL)  # one object of the step is in S3, its manifest is not
        return put(self, key, open_body, what)

    S3Store._put = killing_put
    sys.exit(main_base.main(sys.argv[1:]))
    """)

STEPS = 3


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_dataset(generate_dataset(train_size=4 * STEPS, val_size=2, seed=5, few_shot=0), folder)
    return folder


def train(run_dir, data_dir, model_path, endpoint, bucket, kill_during_upload_of=None, strategy="single"):
    overrides = (fsdp2_overrides() if strategy in DISTRIBUTED_STRATEGIES else []) + [
        f"data.train_data=[{data_dir / 'train.parquet'}]",
        f"data.val_data=[{data_dir / 'validation.parquet'}]",
        f"trainer.policy.model.path={model_path}",
        *TINY_RUN_OVERRIDES,
        "trainer.eval_batch_size=2",
        "generator.eval_sampling_params.max_generate_length=4",
        "trainer.policy.model.lora.rank=4",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.eval_before_train=false",
        f"trainer.eval_interval={STEPS}",
        "trainer.ckpt_interval=1",
        "trainer.logger=jsonl",
        f"trainer.ckpt_path={run_dir / 'ckpts'}",
        f"trainer.export_path={run_dir / 'exports'}",
        "trainer.resume_mode=latest",
        "trainer.project_name=proj",
        "trainer.run_name=run1",
        f"trainer.s3.bucket={bucket}",
        f"trainer.s3.endpoint_url={endpoint}",
        "trainer.s3.keep_local=1",
        "trainer.s3.keep_remote=3",
    ]
    env = subprocess_env(KILL_DURING_UPLOAD_OF=kill_during_upload_of or "")
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, *overrides], env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("strategy", ["single", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_a_run_killed_during_an_upload_resumes_from_the_newest_complete_s3_checkpoint(
    tmp_path, data_dir, tiny_model, s3_server, s3_bucket, strategy
):
    killed = train(tmp_path / "vm1", data_dir, tiny_model, s3_server, s3_bucket, "2", strategy)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert complete_steps(s3_server, s3_bucket, "proj/run1") == [1]
    assert len(s3_keys(s3_server, s3_bucket, "proj/run1/global_step_2/")) == 1  # partial, no manifest

    shutil.rmtree(tmp_path / "vm1")  # the machine is gone with its local checkpoints
    resumed = train(tmp_path / "vm2", data_dir, tiny_model, s3_server, s3_bucket, strategy=strategy)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"downloaded checkpoint global_step_1 from s3://{s3_bucket}/proj/run1/global_step_1/" in resumed.stderr
    assert "global_step_1 at step 1" in resumed.stderr

    assert complete_steps(s3_server, s3_bucket, "proj/run1") == [1, 2, 3]
    ckpts = tmp_path / "vm2" / "ckpts"
    assert sorted(p.name for p in ckpts.iterdir()) == ["global_step_3", LATEST_CKPT_FILE]
    assert (ckpts / LATEST_CKPT_FILE).read_text() == "3\n"
    assert "uploaded checkpoint global_step_3 to " in resumed.stderr
    if strategy in DISTRIBUTED_STRATEGIES:  # both ranks' shards of the sharded policy checkpoint are in S3
        shards = s3_keys(s3_server, s3_bucket, "proj/run1/global_step_3/policy/model_optim/")
        assert [key.rsplit("/", 1)[1] for key in shards] == [".metadata", "__0_0.distcp", "__1_0.distcp"]

    eval_keys = s3_keys(s3_server, s3_bucket, "evals/run1/")
    assert "evals/run1/global_step_3/aggregated_results.jsonl" in eval_keys
    assert "evals/run1/global_step_3/MANIFEST.json" in eval_keys
