"""Eval-only entrypoint: one eval of a model, dumps locally and in S3 (a real moto server through boto3)."""

from __future__ import annotations

import json

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.entrypoints.main_generate import main
from skyrl_train.testing.s3 import s3_client


def test_evaluates_once_and_dumps_locally_and_to_s3(tmp_path, tiny_model, s3_server, s3_bucket, monkeypatch):
    write_dataset(generate_dataset(train_size=1, val_size=3, seed=1), tmp_path / "data")
    exports = tmp_path / "exports"
    status = main(
        [
            "data.train_data=[]",
            f"data.val_data=[{tmp_path / 'data' / 'validation.parquet'}]",
            f"trainer.policy.model.path={tiny_model}",
            "trainer.bf16=false",
            "trainer.logger=jsonl",
            "trainer.run_name=eval7",
            f"trainer.s3.bucket={s3_bucket}",
            "generator.eval_n_samples_per_prompt=2",
            "generator.eval_sampling_params.max_generate_length=4",
            f"trainer.export_path={exports}",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}",
        ]
    )
    assert status == 0
    dump = exports / "dumped_evals" / "eval_only"
    rows = [json.loads(line) for line in (dump / "synthetic_arithmetic.jsonl").read_text().splitlines()]
    assert len(rows) == 6  # 3 problems x 2 samples
    logged = json.loads((exports / "metrics.jsonl").read_text().splitlines()[-1])
    assert (
        logged["eval/all/pass_at_2"]
        == json.loads((dump / "aggregated_results.jsonl").read_text())["eval/all/pass_at_2"]
    )
    keys = sorted(o["Key"] for o in s3_client(s3_server).list_objects_v2(Bucket=s3_bucket)["Contents"])
    assert keys == [
        "evals/eval7/eval_only/MANIFEST.json",
        "evals/eval7/eval_only/aggregated_results.jsonl",
        "evals/eval7/eval_only/synthetic_arithmetic.jsonl",
    ]
