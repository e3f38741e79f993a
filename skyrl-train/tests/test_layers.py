"""skyrl_train imports in one direction: every module imports only modules of its own layer or a lower one.

The layers, bottom to top, are `LAYERS` (skyrl-train/README.md shows them with the folders). A module belongs to the
layer of the longest prefix in `LAYERS` that names it or a package above it, so a module can sit in a different layer
from its package; each such exception says why. There is no allow-list: a new upward import fails here, and a new module must be
given a layer (`test_every_module_has_a_layer`).

What counts as an import: every ``import`` / ``from ... import`` statement in the module's source, at module level,
inside functions and under ``if TYPE_CHECKING:`` alike (a type annotation is a dependency too), with relative imports
resolved. Importing ``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py``, so those packages count as imported.
Not counted: modules loaded by name at run time (``importlib.import_module``), the way plugin registries load their
entries (`skyrl_gym.make`'s ``"module:Class"``, the algorithm registries' built-ins, ``inference_engines``' lazy
attributes); such a name is data the caller passes, like a config value.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import skyrl_train

PACKAGE_ROOT = Path(skyrl_train.__file__).resolve().parent

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # Shared types and helpers: imported by everything, importing nothing above. `training_batch` is the tensor batch
    # type workers, datasets and the trainer pass around (upstream's path).
    ("0 types, utils", ("skyrl_train.types", "skyrl_train.utils", "skyrl_train.training_batch")),
    ("1 config", ("skyrl_train.config",)),
    # What the config selects and the workers compute with: models (loading, LoRA), losses and estimators, datasets,
    # metric definitions, tracking; checkpoint folders and the S3 storage built on them (`storage` imports
    # `checkpoints`, never the reverse). `utils.ppo_utils` re-exports `algorithms` under upstream SkyRL's path, so it
    # sits in the layer of what it re-exports.
    (
        "2 models, algorithms, dataset, metrics, tracking, checkpoints, storage",
        (
            "skyrl_train.models",
            "skyrl_train.algorithms",
            "skyrl_train.utils.ppo_utils",
            "skyrl_train.dataset",
            "skyrl_train.metrics",
            "skyrl_train.tracking",
            "skyrl_train.checkpoints",
            "skyrl_train.storage",
        ),
    ),
    (
        "3 workers, inference engines, weight sync",
        ("skyrl_train.workers", "skyrl_train.inference_engines", "skyrl_train.weight_sync"),
    ),
    ("4 distributed, strategies", ("skyrl_train.distributed", "skyrl_train.strategies")),
    # The step and what runs it: rollouts, preflight, the trainer and its helpers, evaluation, serving the policy over
    # HTTP (`serve` answers through a generator), supervised fine-tuning (`sft` tokenises as the generator does).
    (
        "5 generators, trainer, serve",
        (
            "skyrl_train.generators",
            "skyrl_train.preflight",
            "skyrl_train.trainer",
            "skyrl_train.trainer_parts",
            "skyrl_train.fully_async_trainer",
            "skyrl_train.trainer_utils",
            "skyrl_train.dynamic_sampling",
            "skyrl_train.evaluate",
            "skyrl_train.serve",
            "skyrl_train.sft",
        ),
    ),
    # Command lines (`python -m skyrl_train.serve` included) and the test helpers, which start whole subsystems.
    ("6 entrypoints, testing", ("skyrl_train.entrypoints", "skyrl_train.serve.__main__", "skyrl_train.testing")),
]


def _all_modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _all_modules()


def layer_of(module: str) -> int | None:
    """The layer of `module`: that of the longest prefix in `LAYERS` naming it or a package above it."""
    if module == "skyrl_train":
        return 0  # the package's own __init__ (its version), run by every import of a module of it
    best, best_length = None, -1
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def imported_modules(module: str, source: str, known: set[str]) -> set[str]:
    """The modules of `known` that `source` (the code of `module`) imports, with the packages above each."""
    is_package = MODULES.get(module, Path()).name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    found = set()
    for name in names:
        parts = name.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in known)
    found.discard(module)
    return found


def upward_imports(modules: dict[str, str]) -> list[str]:
    """Every import in `modules` (name -> source) of a module in a higher layer than the importer's."""
    problems = []
    for module, source in sorted(modules.items()):
        own = layer_of(module)
        for imported in sorted(imported_modules(module, source, set(MODULES) | set(modules))):
            theirs = layer_of(imported)
            if own is not None and theirs is not None and theirs > own:
                problems.append(f"{module} (layer {LAYERS[own][0]}) imports {imported} (layer {LAYERS[theirs][0]})")
    return problems


def test_every_module_has_a_layer():
    assert [m for m in sorted(MODULES) if layer_of(m) is None] == []


def test_no_module_imports_a_higher_layer():
    assert upward_imports({m: path.read_text() for m, path in MODULES.items()}) == []


def test_the_config_modules_import_each_other_without_a_cycle():
    # The bottom layer must import in any order (tests/config/test_import_graph.py runs each module first).
    config = sorted(m for m in MODULES if m.startswith("skyrl_train.config."))
    graph = {m: imported_modules(m, MODULES[m].read_text(), set(config)) for m in config}
    order: list[str] = []
    while graph:
        ready = sorted(m for m, deps in graph.items() if deps <= set(order))
        assert ready, f"import cycle among config modules: {graph}"
        order += ready
        for m in ready:
            del graph[m]


@pytest.mark.parametrize(
    "source",
    [
        "import skyrl_train.trainer",
        "from skyrl_train import trainer",
        "from skyrl_train.trainer import RayPPOTrainer",
        "def f():\n    from skyrl_train.trainer import RayPPOTrainer",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from skyrl_train.trainer import RayPPOTrainer",
        "from ..trainer import RayPPOTrainer",
    ],
    ids=["import", "from-package", "from-module", "in-function", "type-checking", "relative"],
)
def test_an_upward_import_is_reported_however_it_is_written(source):
    # A module of layer 1 (config) importing the trainer (layer 5), written six ways.
    assert upward_imports({"skyrl_train.config.example": source}) == [
        "skyrl_train.config.example (layer 1 config) imports skyrl_train.trainer (layer 5 generators, trainer, serve)"
    ]


def test_importing_a_module_counts_the_packages_above_it():
    # `skyrl_train.algorithms.advantages` runs `skyrl_train/algorithms/__init__.py` (layer 2) first.
    problems = upward_imports({"skyrl_train.config.example": "import skyrl_train.algorithms.advantages"})
    assert "skyrl_train.config.example (layer 1 config) imports skyrl_train.algorithms " in "\n".join(problems) + " "
