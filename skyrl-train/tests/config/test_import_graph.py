"""The config package imports in any order and without torch: it is the bottom layer every other package reads.

The direction of imports (config imports only `skyrl_train.types` and `skyrl_train.utils` besides itself) and the
absence of cycles among its modules are checked statically in ``tests/test_layers.py``; here the imports run.
"""

import subprocess
import sys
from pathlib import Path

import pytest

import skyrl_train

CONFIG_DIR = Path(skyrl_train.__file__).resolve().parent / "config"
CONFIG_MODULES = sorted(f"skyrl_train.config.{p.stem}" for p in CONFIG_DIR.glob("*.py") if p.stem != "__init__")


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
