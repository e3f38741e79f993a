"""`trainer.device` and `trainer.bf16`: which device and dtype a run's models get (`skyrl_train.utils.device`).

The CUDA branches are checked with torch's CUDA queries replaced by a machine with two GPUs: `torch.device`
objects can name a GPU without one.
"""

import pytest
import torch

from skyrl_train.utils.device import check_device_name, resolve_device, training_dtype, uses_bf16


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:7"])
def test_well_formed_device_names_pass(name):
    assert check_device_name(name) is None


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "CPU", "mps", "cpu:0"])
def test_other_device_names_are_named_in_the_problem(name):
    assert check_device_name(name) == f"must be one of auto, cpu, cuda or cuda:N, got {name!r}"


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_auto_is_the_current_gpu_when_there_is_one(two_gpus):
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_is_the_cpu_without_a_gpu(no_gpu):
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_a_gpu_this_process_cannot_see_is_refused(no_gpu, name):
    with pytest.raises(ValueError, match=rf"trainer.device={name} but this process sees 0 CUDA device\(s\)"):
        resolve_device(name)


def test_a_gpu_index_past_the_last_is_refused(two_gpus):
    with pytest.raises(ValueError, match=r"trainer.device=cuda:2 but this process sees 2 CUDA device\(s\)"):
        resolve_device("cuda:2")


def test_a_malformed_name_is_refused_with_the_key():
    with pytest.raises(ValueError, match="trainer.device must be one of"):
        resolve_device("gpu")


@pytest.mark.parametrize(
    ("bf16", "device", "expected"),
    [
        (None, "cpu", torch.float32),
        (None, torch.device("cuda", 0), torch.bfloat16),
        (None, "cuda:1", torch.bfloat16),
        (True, "cpu", torch.bfloat16),
        (False, "cuda", torch.float32),
    ],
)
def test_unset_bf16_is_bf16_on_cuda_and_fp32_on_the_cpu_and_a_set_value_wins(bf16, device, expected):
    assert training_dtype(bf16, device) == expected
    assert uses_bf16(bf16, device) == (expected == torch.bfloat16)
