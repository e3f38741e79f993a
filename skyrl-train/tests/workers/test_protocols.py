"""The single-process workers and fsdp2's worker groups both are what the trainer drives
(`skyrl_train.workers.protocols`): checked with `isinstance` on real single-process workers, and statically (members
and parameter names) on the group classes, whose instances need a Ray cluster (the slow
`tests/distributed/test_fsdp2_matches_single.py` checks them with `isinstance` too)."""

from __future__ import annotations

import inspect

import pytest

from skyrl_train.config.schema import (
    AlgorithmConfig,
    CriticConfig,
    ModelConfig,
    PolicyConfig,
    RefConfig,
    RefModelConfig,
)
from skyrl_train.distributed.worker_groups import CriticWorkerGroup, PolicyWorkerGroup, RefWorkerGroup
from skyrl_train.testing import tiny_model  # noqa: F401
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker
from skyrl_train.workers.protocols import Critic, Policy, Reference


def protocol_members(protocol: type) -> tuple[set[str], set[str]]:
    """(method names, attribute names) the protocol declares, its base protocols included."""
    methods, attributes = set(), set()
    for base in protocol.__mro__:
        if getattr(base, "_is_protocol", False) and base.__module__ == protocol.__module__:
            attributes |= set(base.__dict__.get("__annotations__", {}))
            methods |= {name for name, value in vars(base).items() if callable(value) and not name.startswith("_")}
    return methods, attributes


def missing_members(cls: type, protocol: type) -> list[str]:
    """The protocol's members ``cls`` lacks, or declares with other parameter names, sorted."""
    methods, attributes = protocol_members(protocol)
    declared = {name for base in cls.__mro__ for name in base.__dict__.get("__annotations__", {})}
    missing = [name for name in attributes if name not in declared and not hasattr(cls, name)]
    for name in methods:
        method = getattr(cls, name, None)
        expected = list(inspect.signature(getattr(protocol, name)).parameters)
        if method is None or list(inspect.signature(method).parameters) != expected:
            missing.append(name)
    return sorted(missing)


@pytest.fixture(scope="module")
def workers(tiny_model):  # noqa: F811
    policy = PolicyWorker(PolicyConfig(model=ModelConfig(path=tiny_model)), AlgorithmConfig())
    ref = RefWorker.for_policy(policy, RefConfig(model=RefModelConfig(path=tiny_model)))
    critic = CriticWorker(CriticConfig(model=ModelConfig(path=tiny_model)), AlgorithmConfig())
    return policy, ref, critic


def test_the_single_process_workers_are_what_the_trainer_drives(workers):
    policy, ref, critic = workers
    assert isinstance(policy, Policy) and isinstance(ref, Reference) and isinstance(critic, Critic)


def test_a_worker_without_a_roles_methods_is_not_that_role(workers):
    policy, ref, critic = workers
    assert not isinstance(ref, Policy) and not isinstance(policy, Critic) and not isinstance(critic, Policy)


@pytest.mark.parametrize(
    ("cls", "protocol"), [(PolicyWorkerGroup, Policy), (RefWorkerGroup, Reference), (CriticWorkerGroup, Critic)]
)
def test_the_fsdp2_worker_groups_declare_their_roles_members_with_the_protocols_parameters(cls, protocol):
    assert missing_members(cls, protocol) == []


def test_the_static_check_names_what_a_class_lacks():
    assert missing_members(RefWorkerGroup, Critic) == [
        "compute_values",
        "load_checkpoint",
        "ppo_train",
        "save_checkpoint",
        "trainable_state_dict",
    ]
