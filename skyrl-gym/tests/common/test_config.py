"""`to_plain`: every form a config block arrives in becomes plain Python containers."""

import dataclasses
from types import MappingProxyType

from omegaconf import OmegaConf

from skyrl_gym.common.config import to_plain


@dataclasses.dataclass
class Limits:
    max_turns: int = 3
    servers: list[str] = dataclasses.field(default_factory=lambda: ["market"])


def test_a_dictconfig_becomes_a_dict_with_interpolations_resolved():
    block = OmegaConf.create({"turns": 4, "limits": {"max_turns": "${turns}"}, "servers": ["market", "search"]})
    plain = to_plain(block)
    assert plain == {"turns": 4, "limits": {"max_turns": 4}, "servers": ["market", "search"]}
    assert type(plain) is dict and type(plain["limits"]) is dict and type(plain["servers"]) is list


def test_a_listconfig_becomes_a_list():
    assert to_plain(OmegaConf.create(["market", "search"])) == ["market", "search"]


def test_a_dataclass_instance_becomes_a_dict():
    assert to_plain(Limits()) == {"max_turns": 3, "servers": ["market"]}


def test_a_read_only_mapping_becomes_a_dict():
    plain = to_plain(MappingProxyType({"max_turns": 2}))
    assert plain == {"max_turns": 2} and type(plain) is dict


def test_none_and_scalars_pass_through():
    assert (to_plain(None), to_plain("market"), to_plain(Limits)) == (None, "market", Limits)
