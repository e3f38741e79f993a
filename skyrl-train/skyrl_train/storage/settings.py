"""Where S3 uploads go, resolved once from `trainer.*` config keys and their environment fallbacks.

=====================  ==========================  ===========================================
what                   config key                  fallback
=====================  ==========================  ===========================================
checkpoint bucket      trainer.s3.bucket           env S3_CHECKPOINT_BUCKET; neither = S3 off
eval-dump bucket       trainer.s3.eval_bucket      env S3_TRAJECTORY_BUCKET, else the ckpt bucket
key prefix             trainer.s3.prefix           trainer.project_name
endpoint               trainer.s3.endpoint_url     env AWS_ENDPOINT_URL, else AWS
region                 trainer.s3.region           env AWS_REGION, else boto3's default chain
resume from run        trainer.resume_run_name     env RESUME_RUN_NAME
=====================  ==========================  ===========================================

Layout: checkpoints at ``s3://{bucket}/{prefix}/{run_name}/global_step_N/`` (+ ``MANIFEST.json`` written
last); eval dumps at ``s3://{eval_bucket}/evals/{run_name}/global_step_N/`` (``eval_only/`` outside training).
Credentials are never configured here: boto3's standard chain finds them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from skyrl_train.storage.retry import RetryPolicy
from skyrl_train.storage.s3 import S3Store, join_key, make_s3_client


@dataclass(frozen=True)
class S3Settings:
    bucket: str
    eval_bucket: str
    prefix: str
    run_name: str
    resume_run_name: str | None
    endpoint_url: str | None
    region: str | None
    keep_local: int
    keep_remote: int
    upload_attempts: int
    flush_timeout_seconds: float

    @classmethod
    def from_trainer_config(cls, trainer_cfg, environ: Mapping[str, str] | None = None) -> S3Settings | None:
        """The settings for `trainer_cfg` (the `trainer` config section), or None when S3 is off."""
        env = os.environ if environ is None else environ
        s3 = trainer_cfg.s3
        bucket = s3.bucket or env.get("S3_CHECKPOINT_BUCKET") or None
        resume_run_name = trainer_cfg.resume_run_name or env.get("RESUME_RUN_NAME") or None
        if bucket is None:
            if resume_run_name:
                raise ValueError(
                    f"resuming from run {resume_run_name!r} (trainer.resume_run_name / RESUME_RUN_NAME) needs S3: "
                    "set trainer.s3.bucket or S3_CHECKPOINT_BUCKET"
                )
            return None
        return cls(
            bucket=bucket,
            eval_bucket=s3.eval_bucket or env.get("S3_TRAJECTORY_BUCKET") or bucket,
            prefix=(s3.prefix if s3.prefix is not None else trainer_cfg.project_name).strip("/"),
            run_name=trainer_cfg.run_name,
            resume_run_name=resume_run_name,
            endpoint_url=s3.endpoint_url or env.get("AWS_ENDPOINT_URL") or None,
            region=s3.region or env.get("AWS_REGION") or None,
            keep_local=s3.keep_local,
            keep_remote=s3.keep_remote,
            upload_attempts=s3.upload_attempts,
            flush_timeout_seconds=s3.flush_timeout_seconds,
        )

    def run_prefix(self, run_name: str | None = None) -> str:
        """Key prefix of a run's checkpoint folders (this run's by default)."""
        return join_key(self.prefix, run_name or self.run_name)

    def eval_prefix(self, global_step: int | None) -> str:
        """Key prefix of one eval's dump: ``evals/{run_name}/global_step_N`` (``eval_only`` when not training)."""
        return join_key("evals", self.run_name, "eval_only" if global_step is None else f"global_step_{global_step}")

    def store(self, bucket: str | None = None) -> S3Store:
        """An `S3Store` on `bucket` (the checkpoint bucket by default) with this run's endpoint and retries."""
        client = make_s3_client(self.endpoint_url, self.region)
        return S3Store(client, bucket or self.bucket, RetryPolicy(attempts=self.upload_attempts))

    def describe(self) -> str:
        endpoint = self.endpoint_url or "AWS"
        return (
            f"checkpoints to s3://{self.bucket}/{self.run_prefix()}/ and eval dumps to "
            f"s3://{self.eval_bucket}/evals/{self.run_name}/ (endpoint {endpoint})"
        )
