"""The config package imports in one direction: no cycle among its modules, and nothing it imports imports it back.

The config is the bottom layer: workers, algorithms, the generator and the entrypoints import it. Outside
its own package it may import only the leaf modules below (which must never import the config package), so a
module of skyrl_train can import `skyrl_train.config` first, or be imported by it, in any order.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import skyrl_train

PACKAGE_ROOT = Path(skyrl_train.__file__).resolve().parent
CONFIG_DIR = PACKAGE_ROOT / "config"
CONFIG_MODULES = sorted(f"skyrl_train.config.{p.stem}" for p in CONFIG_DIR.glob("*.py") if p.stem != "__init__")
# Modules outside the package the config reads: SamplingParams (the engine's dataclass is the schema of
# generator.sampling_params), the extra sampling keys the vLLM backend passes on (vllm.translate, which imports only
# base) and the registries of advantage estimators and policy losses (names checked by validate_cfg, imported when
# it runs), and the device names `trainer.device` accepts (utils.device, which imports torch only when called).
ALLOWED_OUTSIDE = {
    "skyrl_train.utils.device",
    "skyrl_train.inference_engines.base",
    "skyrl_train.inference_engines.vllm.translate",
    "skyrl_train.algorithms.registry",
}


def _source(module: str) -> Path:
    path = PACKAGE_ROOT.parent.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _imports(module: str) -> set[str]:
    """Every skyrl_train module `module` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(_source(module).read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("skyrl_train.") and _source_exists(name)}


def _source_exists(module: str) -> bool:
    return _source(module).exists()


def test_config_modules_import_each_other_without_a_cycle():
    graph = {m: {i for i in _imports(m) if i in CONFIG_MODULES} for m in CONFIG_MODULES}
    order: list[str] = []
    while graph:
        ready = sorted(m for m, deps in graph.items() if deps <= set(order))
        assert ready, f"import cycle among config modules: {graph}"
        order += ready
        for m in ready:
            del graph[m]


def test_outside_the_package_the_config_imports_only_leaf_modules_that_never_import_it():
    outside = {i for m in CONFIG_MODULES for i in _imports(m) if not i.startswith("skyrl_train.config")}
    assert outside <= ALLOWED_OUTSIDE, outside - ALLOWED_OUTSIDE
    for module in ALLOWED_OUTSIDE:
        back = {i for i in _imports(module) if i.startswith("skyrl_train.config")}
        assert not back, f"{module} imports {back}, which imports it back"


@pytest.mark.parametrize("first", [*CONFIG_MODULES, "skyrl_train.algorithms"])
def test_each_module_imports_first_in_a_fresh_interpreter(first):
    # Then everything else, so that every module is also imported after one that pulled in part of the package.
    others = [m for m in CONFIG_MODULES if m != first]
    code = "; ".join(f"import {m}" for m in [first, *others, "skyrl_train.config"])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_importing_the_config_does_not_load_torch_or_the_algorithms():
    code = (
        "import sys, skyrl_train.config; "
        "print(sorted(m for m in ('torch', 'skyrl_train.algorithms', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr
