"""The package's import graph: every module imports only modules of its own or an earlier layer, and no
import leads back to where it started."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "bert_keras"

# The layers, first to last (README, "API map"). A module may import its own layer's and earlier layers' modules.
LAYERS = [
    ["_backend", "_platform", "_checks", "_contract", "_faults", "_files", "_locks", "dtypes", "cluster"],
    ["layers"],
    ["presets"],
    ["text"],
    ["hub"],
    ["formats"],
    ["encoder", "models"],
    ["heads"],
    ["predictions"],
    ["embedder"],
    ["checkpoints"],
    ["tasks"],
    ["export"],
    ["embedding_files", "search"],
    ["lora"],
    ["data", "entities", "optimization", "evaluate"],
    ["training"],
    ["inspection", "beam"],
    ["demo"],
    ["commands"],
    ["cli"],
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _module_name(path):
    """`bert_keras/formats/tables.py` -> `bert_keras.formats.tables`; a package is named by its folder."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PATHS = {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _packages(name):
    """The packages that hold module `name` inside bert_keras: importing it runs their `__init__` first."""
    parts = name.split(".")
    return {".".join(parts[:end]) for end in range(2, len(parts))}


def _imported(module, tree):
    """The package's modules that `module` runs by its imports, at module level and inside functions."""
    is_package = PATHS[module].name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "bert_keras"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            if node.level:  # relative: counted from the package of `module`
                package = module.split(".")[: None if is_package else -1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            if base and base.split(".")[0] == "bert_keras":
                # `from P import x`: the submodule P.x, or a name that P's `__init__` defines.
                found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in PATHS else base for alias in node.names}
    # The packages that hold an imported module run too, except those that hold `module`: they are running already.
    found |= {package for name in found for package in _packages(name)} - _packages(module)
    return {name for name in found if name in PATHS and name != module}


def import_graph():
    """`{module: set of modules it imports}` over every module of the package."""
    return {module: _imported(module, ast.parse(path.read_text())) for module, path in PATHS.items()}


def find_cycle(graph):
    """A cycle of `graph` as a list of nodes whose last is its first, or None. Depth first: a cycle is a path
    that comes back to a node on itself."""
    finished, path = set(), []

    def visit(node):
        if node in path:
            return path[path.index(node):] + [node]
        if node in finished:
            return None
        path.append(node)
        for neighbour in sorted(graph.get(node, ())):
            cycle = visit(neighbour)
            if cycle:
                return cycle
        path.pop()
        finished.add(node)
        return None

    for node in sorted(graph):
        cycle = visit(node)
        if cycle:
            return cycle
    return None


def _layer(module):
    """The top-level part of the package a module belongs to (`bert_keras.formats.tables` -> `formats`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_has_a_layer():
    missing = sorted({_layer(module) for module in PATHS} - {None} - set(RANK))
    assert missing == [], f"modules without a layer in LAYERS: {missing}"


@pytest.mark.parametrize("module", sorted(m for m in PATHS if _layer(m) is not None))
def test_no_upward_imports(module):
    assert _layer(module) in RANK, f"{module}: {_layer(module)!r} has no layer in LAYERS"
    own = RANK[_layer(module)]
    upward = sorted(name for name in _imported(module, ast.parse(PATHS[module].read_text()))
                    if _layer(name) in RANK and RANK[_layer(name)] > own)
    assert upward == [], f"{module} imports later layers: {upward}"


def test_no_import_cycle():
    """No chain of imports, at module level or inside functions, leads from a module back to itself."""
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_holds_function_level_imports_and_the_packages_they_run():
    tree = ast.parse(
        "from bert_keras.formats import tables\n"
        "def f():\n"
        "    from bert_keras.checkpoints import load_checkpoint\n"
        "    import bert_keras.hub.loader\n"
    )
    assert _imported("bert_keras.encoder", tree) == {
        "bert_keras.formats.tables", "bert_keras.formats", "bert_keras.checkpoints", "bert_keras.hub.loader",
        "bert_keras.hub",
    }
    assert _imported("bert_keras.formats.google", ast.parse("from bert_keras.formats import tables")) == {
        "bert_keras.formats.tables"  # its own package is running already
    }
    graph = import_graph()
    assert {"bert_keras.formats", "bert_keras._contract"} <= graph["bert_keras.encoder"]
    assert "bert_keras.encoder" in graph["bert_keras.checkpoints._build"]


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"b"}}) is None


def test_the_sentence_encoder_jobs_live_on_their_own_floors():
    """One job per module: the task's folder reader is a format, and the methods the task shares with its loaded
    export (`EmbeddingMethods`) sit at or below the task's floor, not in the export above it."""
    defined = {node.name: module for module, path in PATHS.items() for node in ast.parse(path.read_text()).body
               if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    assert RANK[_layer(defined["EmbeddingMethods"])] <= RANK["tasks"] < RANK["export"]
    assert _layer(defined["read_sentence_transformers_folder"]) == "formats"
    jobs = ["SentenceEncoder", "write_embeddings", "SentenceIndex", "read_sentence_transformers_folder"]
    assert len({defined[name] for name in jobs}) == len(jobs), {name: defined[name] for name in jobs}


def test_the_distribution_jobs_live_on_their_own_floors():
    """The cluster (TF_CONFIG, the rendezvous) is a low module of its own; the strategy, the feeding of replicas and
    the workers' backups are the training harness's; each is defined once, and the dead helpers are gone."""
    defined = {}
    for module, path in PATHS.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                defined.setdefault(node.name, []).append(module)
    jobs = {
        "read_tf_config": "bert_keras.cluster", "rendezvous": "bert_keras.cluster",
        "make_strategy": "bert_keras.training.strategy", "is_chief": "bert_keras.training.strategy",
        "trainable_model": "bert_keras.training.strategy", "distribute_batches": "bert_keras.training.feeding",
        "worker_backup_dir": "bert_keras.training.backup", "agree_on_epoch": "bert_keras.training.backup",
    }
    assert {name: defined.get(name) for name in jobs} == {name: [module] for name, module in jobs.items()}
    assert [name for name in ("agree_on_backup", "all_workers", "_all_gather_int") if name in defined] == []
    assert "bert_keras.distribute" not in PATHS
    assert RANK["cluster"] == 0 and _imported("bert_keras.cluster", ast.parse(PATHS["bert_keras.cluster"].read_text())) == {
        "bert_keras._checks"}


# Data tables are exempt from the size limits below: modules that are mostly one literal table.
DATA_TABLES = {"bert_keras.text._unicode_tables"}
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 120


def test_no_module_over_600_lines_and_no_function_over_120():
    """One job per module, a function readable in one sitting (docstrings count; data tables are exempt)."""
    too_long = []
    for module, path in PATHS.items():
        if module in DATA_TABLES:
            continue
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{module}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{module}.{node.name}: {length} lines")
    assert not too_long, too_long
