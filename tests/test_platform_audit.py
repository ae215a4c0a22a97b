"""Platform-specific code only in `bert_keras/_platform/`, and each native dependency it names still there.

The audit reads every module of the package: an import of `ctypes`, of the import system's machinery
(`importlib.abc`, `importlib.machinery`), of a flatbuffer library or schema (`flatbuffers`, `schema_py_generated`),
or a use of `sys.meta_path`, is platform-specific and allowed only in `bert_keras/_platform/`. The tests after it pin
what each of that folder's modules relies on (glibc's `renameat2`, tensorflow-text's kernel library, the TFLite
schema's `IfOptions` and the subgraph names of a converted `tf.cond`).
"""

import ast
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from bert_keras._platform import native, text_models, tflite_file

ROOT = pathlib.Path(__file__).resolve().parent.parent / "bert_keras"
PLATFORM = ROOT / "_platform"
PLATFORM_MODULES = ("ctypes", "importlib.abc", "importlib.machinery", "flatbuffers")
PLATFORM_SUFFIXES = ("schema_py_generated",)
# Platform-specific code outside the folder, each with its reason; the list only shrinks.
ALLOWED = {
    "_native_log.py": {"import importlib.abc", "sys.meta_path"},  # to move into _platform/native_log.py
}


def _is_platform_module(name):
    return name.startswith(PLATFORM_MODULES) or name.split(".")[-1] in PLATFORM_SUFFIXES


def platform_uses(source):
    """`(line, what)` of every platform-specific import or use in the module's `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _is_platform_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(_is_platform_module(name) for name in names):
                found.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.Attribute) and node.attr == "meta_path":
            found.append((node.lineno, "sys.meta_path"))
    return found


def test_platform_code_only_in_the_platform_folder():
    offenders = {}
    for path in sorted(ROOT.rglob("*.py")):
        if PLATFORM in path.parents:
            continue
        relative = str(path.relative_to(ROOT))
        uses = [use for use in platform_uses(path.read_text()) if use[1] not in ALLOWED.get(relative, {})]
        if uses:
            offenders[relative] = uses
    assert offenders == {}, f"platform-specific code outside bert_keras/_platform/: {offenders}"


def test_the_audit_finds_what_it_looks_for():
    source = ("import ctypes\nimport importlib.abc\nfrom ai_edge_litert import schema_py_generated\n"
              "import flatbuffers\nsys.meta_path.insert(0, finder)\nimport os\n")
    assert [what for _, what in platform_uses(source)] == [
        "import ctypes", "import importlib.abc", "from ai_edge_litert import", "import flatbuffers", "sys.meta_path"]


def test_every_platform_module_names_what_it_depends_on():
    index = (PLATFORM / "__init__.py").read_text()
    for path in sorted(PLATFORM.glob("*.py")):
        if path.name == "__init__.py":
            continue
        assert f"`{path.stem}`" in index, f"{path.name} is missing from bert_keras/_platform/__init__.py's table"
        assert "Depends on" in ast.get_docstring(ast.parse(path.read_text())) or "|" in path.read_text()[:4000], path.name


# --- native: glibc's renameat2, tensorflow-text's kernel library ------------------------------------------------


def test_rename_exchange_swaps_two_directories_in_one_step(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "mark").write_text("a")
    (b / "mark").write_text("b")
    assert native._renameat2 is not None  # glibc >= 2.28: the swap this package's writers rely on
    assert native.rename_exchange(str(a), str(b)) is True
    assert (a / "mark").read_text() == "b" and (b / "mark").read_text() == "a"
    with pytest.raises(OSError, match="Could not swap"):
        native.rename_exchange(str(a), str(tmp_path / "missing"))


def test_tensorflow_text_holds_its_kernel_registerers_where_the_loader_looks():
    import ctypes

    framework, kernels = native.text_kernel_libraries()
    assert os.path.isfile(framework) and os.path.isfile(kernels)
    library = ctypes.CDLL(kernels, mode=ctypes.RTLD_GLOBAL)  # TensorFlow is imported: its framework library is loaded
    for name in native.TEXT_KERNEL_REGISTERERS:
        assert getattr(library, name), name


# --- tflite_file: the schema's IfOptions, and the names of a converted tf.cond's branches ------------------------


def test_a_converted_packing_condition_takes_its_gather_branch_after_the_rewrite():
    from bert_keras.layers import PackedTokenIndex, PackTokens, UnpackTokens

    index, pack, unpack = PackedTokenIndex(), PackTokens(), UnpackTokens()

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.float32), tf.TensorSpec([None, None], tf.int32)])
    def packed_twice(x, mask):
        with tf.name_scope("encoder"):  # inside a model, as an export converts them
            packing = index(mask)
            return unpack(pack(x, packing) * 2.0, packing)

    module = tf.Module()
    module.packed_twice = packed_twice
    converter = tf.lite.TFLiteConverter.from_concrete_functions([packed_twice.get_concrete_function()], module)
    data = converter.convert()
    schema = tflite_file._schema()

    def branches(data):
        model = schema.Model.GetRootAs(data, 0)
        names = [model.Subgraphs(i).Name().decode() for i in range(model.SubgraphsLength())]
        codes = [max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
                 for i in range(model.OperatorCodesLength())]
        found = []
        for graph in range(model.SubgraphsLength()):
            subgraph = model.Subgraphs(graph)
            for i in range(subgraph.OperatorsLength()):
                operator = subgraph.Operators(i)
                if codes[operator.OpcodeIndex()] == schema.BuiltinOperator.IF:
                    options = schema.IfOptions()
                    table = operator.BuiltinOptions()
                    options.Init(table.Bytes, table.Pos)
                    found.append((names[options.ThenSubgraphIndex()], names[options.ElseSubgraphIndex()]))
        return found

    before = branches(data)
    assert before and all(tflite_file._PACKING_BRANCH.search(then) and tflite_file._PACKING_BRANCH.search(other)
                          for then, other in before), before  # the converter's names the rewrite matches
    rewritten = tflite_file.gathered_branches(data)
    assert len(rewritten) == len(data)
    assert all(then == other and "_cond_false_" in then for then, other in branches(rewritten))
    interpreter = tf.lite.Interpreter(model_content=rewritten)
    runner = interpreter.get_signature_runner()
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    mask = np.array([[1, 1, 0], [1, 0, 0]], "int32")
    out = next(iter(runner(x=x, mask=mask).values()))
    np.testing.assert_array_equal(out, x * 2.0 * mask[..., None])


# --- text_models: tensorflow-text's normalizer model and darts-clone's trie -------------------------------------


def test_the_double_array_finds_every_key_and_no_other():
    keys = sorted({chr(point).encode("utf-8") for point in (65, 66, 233, 0x2019, 0x1F600, 0x4E00, 0x4E01)})
    array = text_models.double_array(keys, list(range(10, 10 + len(keys))))
    assert [text_models.lookup(array, key) for key in keys] == list(range(10, 10 + len(keys)))
    assert text_models.lookup(array, b"C") is None and text_models.lookup(array, "\u4e02".encode()) is None


def test_a_normalizer_model_built_here_normalizes_in_tensorflow_texts_kernel():
    import tensorflow_text as tf_text

    table = {ord("A"): b"a", 0xE9: b"e", 0x2019: b"'", 0xAD: b"", 0: b""}  # upper case, accent, quote, soft hyphen
    normalizer = tf_text.FastBertNormalizer(model_buffer=text_models.normalizer_model_buffer(table, False))
    text = "A caf\u00e9\u2019s co\u00adop\u0000"
    assert normalizer.normalize(tf.constant([text])).numpy().tolist() == [b"a cafe's coop"]
