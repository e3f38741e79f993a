"""`trainer.device` and `trainer.bf16`: which device and dtype a run's models get (`skyrl_train.utils.device`).

The AMX detection reads /proc/cpuinfo texts written out here, so the choices are checked for a Xeon with AMX and for
a CPU without it on any machine.

The CUDA branches are checked with torch's CUDA queries replaced by a machine with two GPUs: `torch.device`
objects can name a GPU without one.
"""

import pytest
import torch

from skyrl_train.utils import device
from skyrl_train.utils.device import (
    autocast_to,
    check_device_name,
    cpu_has_amx_bf16,
    precision,
    resolve_device,
    training_dtype,
    uses_bf16,
)


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


XEON_FLAGS = "fpu vme de pse tsc msr avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
"""A flags line of a Sapphire Rapids Xeon (shortened)."""


def cpuinfo(flags: str) -> str:
    """/proc/cpuinfo's text for a two-core machine with these flags."""
    core = "processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: a CPU\nflags\t\t: {flags}\nbogomips\t: 4000\n"
    return "\n".join(core.format(n=n, flags=flags) for n in range(2))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (cpuinfo(XEON_FLAGS), True),
        (cpuinfo("fpu avx2 avx512f avx512_bf16"), False),  # bf16 instructions without AMX tiles (e.g. Zen 4)
        (cpuinfo("fpu avx2 amx_bf16 amx_tile"), False),
        (cpuinfo("fpu sse avx avx2 fma"), False),  # the AVX2-only CPU of a typical cloud VM
        ("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n", False),  # Arm: no flags line
        ("", False),
    ],
)
def test_amx_bf16_needs_both_flags_in_the_flags_line(text, expected):
    assert cpu_has_amx_bf16(text) is expected


def test_a_machine_without_proc_cpuinfo_has_no_amx_bf16(monkeypatch, tmp_path):
    monkeypatch.setattr(device, "CPUINFO", tmp_path / "absent")
    device._this_cpu_has_amx_bf16.cache_clear()
    try:
        assert cpu_has_amx_bf16() is False
    finally:
        device._this_cpu_has_amx_bf16.cache_clear()


AUTOCAST = (torch.float32, torch.bfloat16, torch.bfloat16)
"""(weights, autocast, engine_cast) of bf16 on the CPU: autocast over fp32 weights, the engine in bf16 copies."""
FP32 = (torch.float32, None, None)


@pytest.mark.parametrize(
    ("bf16", "device_name", "flags", "expected", "reason"),
    [
        (None, "cpu", XEON_FLAGS, AUTOCAST, "trainer.bf16 unset and the CPU has AMX bf16"),
        (None, "cpu", "fpu avx2", FP32, "trainer.bf16 unset and the CPU has no AMX"),
        (True, "cpu", "fpu avx2", AUTOCAST, "trainer.bf16=true"),
        (False, "cpu", XEON_FLAGS, FP32, "trainer.bf16=false"),
        (None, "cuda:1", "fpu avx2", (torch.bfloat16, None, None), "trainer.bf16 unset: bf16 on CUDA"),
        (None, torch.device("cuda", 0), XEON_FLAGS, (torch.bfloat16, None, None), "bf16 on CUDA"),
        (False, "cuda", XEON_FLAGS, FP32, "trainer.bf16=false"),
    ],
)
def test_unset_bf16_is_bf16_on_cuda_and_on_a_cpu_with_amx_and_a_set_value_wins(
    bf16, device_name, flags, expected, reason
):
    chosen = precision(bf16, device_name, cpuinfo(flags))
    assert (chosen.weights, chosen.autocast, chosen.engine_cast) == expected
    assert reason in chosen.reason
    assert chosen.compute == (expected[1] or expected[0])


def test_the_log_line_says_which_regime_and_why():
    assert precision(None, "cpu", cpuinfo(XEON_FLAGS)).reason == (
        "bf16 autocast over fp32 weights in training, bf16 weights in the hf engine "
        "(trainer.bf16 unset and the CPU has AMX bf16)"
    )
    assert (
        precision(None, "cpu", cpuinfo("fpu avx2")).reason == "float32 (trainer.bf16 unset and the CPU has no AMX bf16)"
    )


@pytest.mark.parametrize(("bf16", "on_cuda"), [(True, torch.bfloat16), (False, torch.float32), (None, torch.bfloat16)])
def test_the_weights_are_bf16_on_cuda_only(bf16, on_cuda):
    assert training_dtype(bf16, "cpu") == torch.float32
    assert training_dtype(bf16, "cuda") == on_cuda
    assert uses_bf16(bf16, "cuda") == (on_cuda == torch.bfloat16)
    assert uses_bf16(True, "cpu") and not uses_bf16(False, "cpu")


def test_autocast_to_none_leaves_the_dtype_of_a_matmul_alone():
    weight = torch.ones(2, 2)
    with autocast_to("cpu", None):
        assert (weight @ weight).dtype == torch.float32
    with autocast_to(torch.device("cpu"), torch.bfloat16):
        assert (weight @ weight).dtype == torch.bfloat16
