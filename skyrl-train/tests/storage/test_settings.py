"""S3Settings: config keys first, then their environment fallbacks."""

import pytest

from skyrl_train.config import load_config
from skyrl_train.storage import S3Settings


def trainer_cfg(*overrides):
    return load_config(list(overrides)).trainer


def test_s3_is_off_without_a_bucket_in_config_or_env():
    assert S3Settings.from_trainer_config(trainer_cfg(), environ={}) is None


def test_bucket_endpoint_and_region_fall_back_to_the_environment():
    env = {"S3_CHECKPOINT_BUCKET": "ckpts", "AWS_ENDPOINT_URL": "http://minio:9000", "AWS_REGION": "eu-west-1"}
    settings = S3Settings.from_trainer_config(trainer_cfg(), environ=env)
    assert (settings.bucket, settings.endpoint_url, settings.region) == ("ckpts", "http://minio:9000", "eu-west-1")


def test_config_keys_win_over_the_environment():
    cfg = trainer_cfg("trainer.s3.bucket=from-config", "trainer.s3.endpoint_url=http://r2:1")
    settings = S3Settings.from_trainer_config(cfg, environ={"S3_CHECKPOINT_BUCKET": "env", "AWS_ENDPOINT_URL": "x"})
    assert (settings.bucket, settings.endpoint_url) == ("from-config", "http://r2:1")


def test_checkpoints_go_under_project_name_and_run_name_by_default():
    cfg = trainer_cfg("trainer.s3.bucket=b", "trainer.project_name=proj", "trainer.run_name=run7")
    settings = S3Settings.from_trainer_config(cfg, environ={})
    assert settings.run_prefix() == "proj/run7"
    assert settings.run_prefix("older_run") == "proj/older_run"


def test_an_explicit_prefix_replaces_the_project_name():
    cfg = trainer_cfg("trainer.s3.bucket=b", "trainer.s3.prefix=/team/exp/", "trainer.run_name=run7")
    assert S3Settings.from_trainer_config(cfg, environ={}).run_prefix() == "team/exp/run7"


def test_eval_dumps_use_the_trajectory_bucket_else_the_checkpoint_bucket():
    cfg = trainer_cfg("trainer.s3.bucket=ckpts", "trainer.run_name=run7")
    assert S3Settings.from_trainer_config(cfg, environ={}).eval_bucket == "ckpts"
    settings = S3Settings.from_trainer_config(cfg, environ={"S3_TRAJECTORY_BUCKET": "trajs"})
    assert settings.eval_bucket == "trajs"
    assert settings.eval_prefix(12) == "evals/run7/global_step_12"
    assert settings.eval_prefix(None) == "evals/run7/eval_only"


def test_resume_run_name_falls_back_to_the_environment():
    settings = S3Settings.from_trainer_config(trainer_cfg("trainer.s3.bucket=b"), environ={"RESUME_RUN_NAME": "old"})
    assert settings.resume_run_name == "old"


def test_resume_run_name_without_s3_is_an_error():
    with pytest.raises(ValueError, match="resuming from run 'old' .* needs S3: set trainer.s3.bucket"):
        S3Settings.from_trainer_config(trainer_cfg(), environ={"RESUME_RUN_NAME": "old"})
