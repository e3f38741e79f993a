"""The real SmolLM2 conversion (~25 s) runs once per session, from two racing processes, into a fresh cache; the tiny
random Llama (`tiny_model`) for tests that only need a model folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_train.models import DEFAULT_MODEL
from skyrl_train.testing import tiny_model  # noqa: F401

_CONVERT = f"""
import json, logging, sys
from skyrl_train.models import materialize_alias
logging.basicConfig(level=logging.INFO)
path, converted = materialize_alias({DEFAULT_MODEL!r}, cache_dir=sys.argv[1])
print(json.dumps({{"path": path, "converted": converted}}))
"""


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory) -> Path:
    """A fresh ``SKYRL_CACHE_DIR``; its ``models`` folder is the models cache."""
    return tmp_path_factory.mktemp("skyrl-cache")


@pytest.fixture(scope="session")
def racing_conversion(cache_home: Path) -> list[dict]:
    """What two processes started together report after each asked for the default alias in the empty cache (and
    their log, under ``"log"``)."""
    models = cache_home / "models"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERT, str(models)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, log = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"conversion process failed with {proc.returncode}: {log[-3000:]}"
        results.append({**json.loads(out.strip().splitlines()[-1]), "log": log})
    return results


@pytest.fixture(scope="session")
def smollm2_path(racing_conversion: list[dict]) -> str:
    """The converted SmolLM2-135M-Instruct folder."""
    return racing_conversion[0]["path"]
