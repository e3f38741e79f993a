"""The three packages install together and agree with their own metadata."""

import importlib
from importlib.metadata import requires, version

import pytest
from packaging.requirements import Requirement


@pytest.mark.parametrize(
    ("distribution", "module"),
    [("skyrl-gym", "skyrl_gym"), ("skyrl-train", "skyrl_train"), ("skyrl-integrations", "skyrl_integrations")],
)
def test_installed_version_matches_the_package(distribution, module):
    assert importlib.import_module(module).__version__ == version(distribution)


def test_integrations_depends_on_both_other_packages():
    names = {Requirement(req).name for req in requires("skyrl-integrations")}
    assert {"skyrl-gym", "skyrl-train"} <= names
