"""The package's import graph: every module imports only modules of its own or an earlier layer."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "bert_keras"

# The layers, first to last (README, "API map"). A module may import its own layer's and earlier layers' modules.
LAYERS = [
    ["_backend", "_checks", "_files", "distribute"],
    ["layers"],
    ["presets"],
    ["encoder"],
    ["heads"],
    ["_task", "pretrainer"],
    ["text"],
    ["hub"],
    ["checkpoints"],
    ["tasks"],
    ["lora"],
    ["saved_model"],
    ["datasets", "optimization", "evaluate"],
    ["training"],
    ["inspect"],
    ["demo"],
    ["cli"],
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
# Imports inside a function that go upwards, each a real cycle (STYLE.md, habit 9).
ALLOWED_UPWARD = {("encoder", "checkpoints")}


def _top(module_path):
    relative = module_path.relative_to(ROOT).with_suffix("")
    return relative.parts[0] if relative.parts[0] != "__init__" else None


def _imports(tree):
    """`(imported top-level bert_keras part, at_module_level)` for each import of bert_keras."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bert_keras"):
            parts = node.module.split(".")
            names = [parts[1]] if len(parts) > 1 else [alias.name for alias in node.names]
            found += [(name, node.col_offset == 0) for name in names]
        elif isinstance(node, ast.Import):
            found += [(a.name.split(".")[1], node.col_offset == 0) for a in node.names if a.name.startswith("bert_keras.")]
    return found


def _modules():
    return sorted(path for path in ROOT.rglob("*.py") if _top(path) is not None)


def test_every_module_has_a_layer():
    missing = sorted({_top(path) for path in _modules()} - set(RANK))
    assert missing == [], f"modules without a layer in LAYERS: {missing}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_upward_imports(path):
    own = _top(path)
    upward = [
        (name, level)
        for name, level in _imports(ast.parse(path.read_text()))
        if name in RANK and RANK[name] > RANK[own] and (own, name) not in ALLOWED_UPWARD
    ]
    assert upward == [], f"{path.relative_to(ROOT)} imports later layers: {upward}"
