"""Shared fixtures of the repository-level tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@contextmanager
def benchmark_module(name: str) -> Iterator[ModuleType]:
    """`benchmarks/<name>.py` imported as module `name` (registered while in use: dataclasses look their module up by
    name)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


@pytest.fixture(scope="session")
def load_benchmark():
    """`benchmark_module`, for fixtures that import a benchmark script: ``with load_benchmark("fault_soak") as m``."""
    return benchmark_module
