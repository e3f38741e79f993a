"""What the remote-engine and weight-sync keys build: one remote engine per URL behind a routing client, and the weight
sync the trainer uses (mode, backend, group override, LoRA folder)."""

from __future__ import annotations

import pytest

from skyrl_train.config import ConfigError, load_config
from skyrl_train.config.schema import to_dict
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.inference_engines.client import InferenceEngineClient
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401
from skyrl_train.utils.redact import REDACTED, is_secret_name, redact_secrets

REMOTE = [
    "generator.run_engines_locally=false",
    "generator.num_inference_engines=2",
    "generator.remote_inference_engine_urls=[127.0.0.1:8101,http://127.0.0.1:8102/v1]",
    "generator.model_name=served-policy",
]


def experiment(tmp_path, *overrides: str) -> BasePPOExp:
    return BasePPOExp(load_config([f"trainer.export_path={tmp_path}", *overrides]))


def test_remote_urls_model_name_and_parallel_sizes_build_one_remote_engine_per_server(
    tmp_path, tiny_tokenizer  # noqa: F811
):
    exp = experiment(
        tmp_path,
        *REMOTE,
        "generator.weight_sync_backend=gloo",
        "generator.inference_engine_tensor_parallel_size=2",
        "generator.inference_engine_pipeline_parallel_size=3",
        "generator.inference_engine_data_parallel_size=1",
    )
    client = exp.get_inference_engine(None, tiny_tokenizer)
    assert isinstance(client, InferenceEngineClient)
    assert [e.url for e in client.engines] == ["http://127.0.0.1:8101", "http://127.0.0.1:8102"]
    assert [e.model_name for e in client.engines] == ["served-policy", "served-policy"]
    assert client.weight_sync_ranks() == 2 * (2 * 3)


def test_the_weight_sync_follows_the_backend_override_and_lora_keys(tmp_path, tiny_tokenizer):  # noqa: F811
    exp = experiment(tmp_path, *REMOTE, "generator.weight_sync_backend=gloo")
    sender = exp.get_weight_sync(exp.get_inference_engine(None, tiny_tokenizer), policy=None)
    assert (sender.mode, sender.backend, sender.override_existing) == ("broadcast", "gloo", True)
    assert sender.master_addr == "127.0.0.1"  # the servers are on this machine

    lora = experiment(
        tmp_path,
        *REMOTE,
        "trainer.policy.model.lora.rank=8",
        f"trainer.policy.model.lora.lora_sync_path={tmp_path / 'adapters'}",
        "generator.override_existing_update_group=disable",
    )
    sender = lora.get_weight_sync(lora.get_inference_engine(None, tiny_tokenizer), policy=None)
    assert (sender.mode, sender.lora_sync_path, sender.override_existing) == ("lora", str(tmp_path / "adapters"), False)
    assert sender.lora_config.rank == 8


def test_the_local_hf_engine_only_takes_version_labels(tmp_path):
    exp = experiment(tmp_path)
    sender = exp.get_weight_sync(engine=None, policy=None)
    assert sender.mode == "shared"


def test_nccl_weight_sync_without_cuda_is_refused_before_training(tmp_path, tiny_tokenizer):  # noqa: F811
    exp = experiment(tmp_path, *REMOTE)  # weight_sync_backend defaults to nccl
    with pytest.raises(ValueError, match="set generator.weight_sync_backend=gloo"):
        exp.get_weight_sync(exp.get_inference_engine(None, tiny_tokenizer), policy=None)


def test_remote_engines_never_sync_by_cuda_ipc_and_its_key_is_refused_for_them(tmp_path, tiny_tokenizer):  # noqa: F811
    with pytest.raises(ConfigError, match="generator.weight_transfer_threshold_cuda_ipc_GB"):
        experiment(tmp_path, *REMOTE, "generator.weight_transfer_threshold_cuda_ipc_GB=2.0")
    exp = experiment(tmp_path, *REMOTE, "generator.weight_sync_backend=gloo")
    assert exp.get_weight_sync(exp.get_inference_engine(None, tiny_tokenizer), policy=None).mode == "broadcast"


def test_the_engine_credentials_are_secret_names_so_every_redaction_hides_them(tmp_path):
    cfg = load_config(
        [
            f"trainer.export_path={tmp_path}",
            *REMOTE,
            "generator.remote_inference_engine_api_key=sk-remote",  # pragma: allowlist secret
            "generator.remote_inference_engine_control_token=ctl-remote",  # pragma: allowlist secret
        ]
    )
    shown = redact_secrets(to_dict(cfg))["generator"]
    assert (shown["remote_inference_engine_api_key"], shown["remote_inference_engine_control_token"]) == (
        REDACTED,
        REDACTED,
    )
    assert is_secret_name("generator.http_endpoint_api_key")
