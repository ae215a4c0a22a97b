"""The Python API prints none of TensorFlow's C++ log lines unless the user asks for them (TF_CPP_MIN_LOG_LEVEL)."""

import os
import subprocess
import sys

import keras
import pytest
from tensorflow.core.protobuf import saved_model_pb2

from bert_keras import BertEncoder
from bert_keras._platform.native_log import is_native_log_line
from bert_keras.export import export_classifier
from bert_keras.tasks import BertClassifier
from bert_keras.text import BertPreprocessor
from tests import sentence_models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "the", "day"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet_python")
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=16)
    classifier = BertClassifier(encoder, num_classes=2, preprocessor=BertPreprocessor(VOCAB, seq_length=16), dropout=0.0)
    export_classifier(classifier, str(root / "clf"), ["neg", "pos"], xla=True)  # the compiled path is checked below
    bert = sentence_models.write_tiny_bert(str(root / "bert"))
    sentence_models.sentence_transformer(bert).save(str(root / "st"))
    return root


def _python(code, **environment):
    """A fresh interpreter running `code` in a user's environment (no TF_CPP_MIN_LOG_LEVEL unless given)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # tests/conftest.py sets it; a user's shell has none
    env.update(environment)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def _tensorflow_lines(stderr):
    words = ("tensorflow", "absl", "xla", "onednn", "cuda", "assert")
    return [line for line in stderr.splitlines()
            if is_native_log_line(line.encode()) or any(word in line.lower() for word in words)]


@pytest.mark.slow
def test_import_load_classifier_and_encode_print_no_tensorflow_line(folders):
    sessions = {  # each in its own interpreter, at once: TensorFlow's start-up lines come once per process
        "import": "import bert_keras, bert_keras.encoder",
        "load_classifier": "from bert_keras.export import load_classifier\n"
                           f"print(load_classifier({str(folders / 'clf')!r}).predict(['good movie'])[0]['label'])",
        "encode": "from bert_keras.tasks.sentence_encoder import SentenceEncoder\n"
                  f"print(SentenceEncoder.from_checkpoint({str(folders / 'st')!r}).encode(['the good day', 'bad']).shape)",
    }
    running = {name: _python(code) for name, code in sessions.items()}
    loud = _python(sessions["import"], TF_CPP_MIN_LOG_LEVEL="0")  # the user's own setting is TensorFlow's
    done = {name: (process, *process.communicate(timeout=600)) for name, process in running.items()}
    for name, (process, stdout, stderr) in done.items():
        assert process.returncode == 0, (name, stderr[-3000:])
        assert _tensorflow_lines(stderr) == [], (name, stderr[-3000:])
    assert done["load_classifier"][1].strip() in ("neg", "pos")
    assert done["encode"][1].strip() == "(2, 16)"
    stdout, stderr = loud.communicate(timeout=600)
    assert loud.returncode == 0, stderr[-3000:]
    assert any(is_native_log_line(line.encode()) for line in stderr.splitlines()), stderr[-3000:]


# A stand-in for TensorFlow's package: during its import it writes what TensorFlow writes (a C++ log line) and
# what must never be lost (a Python warning, a plain line), and records the log level it was imported under.
FAKE_TENSORFLOW = """
import os, sys, warnings
LEVEL = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
os.write(2, b"I0000 00:00:1796336150.228545   17621 port.cc:153] oneDNN custom operations are on.\\n")
warnings.warn("a warning raised while tensorflow imports")
print("a line of the user's", file=sys.stderr, flush=True)
"""
FAKE_USER = """
import os, sys
import bert_keras
import tensorflow
print(tensorflow.LEVEL, os.environ.get("TF_CPP_MIN_LOG_LEVEL"), type(tensorflow.__loader__).__name__,
      [type(finder).__name__ for finder in sys.meta_path if "Quiet" in type(finder).__name__])
os.write(2, b"E0000 00:00:1796336150.228545   17621 after.cc:1] written after the import\\n")
"""


def test_the_first_import_of_tensorflow_is_quiet_and_leaves_everything_else_as_it_was(tmp_path):
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text(FAKE_TENSORFLOW)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    quiet = subprocess.run([sys.executable, "-c", FAKE_USER], capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    # Imported at level 3; the variable gone again; TensorFlow's own loader; the hook gone from sys.meta_path.
    assert quiet.stdout == "3 None SourceFileLoader []\n"
    lines = quiet.stderr.splitlines()
    assert lines[0].endswith("UserWarning: a warning raised while tensorflow imports")
    assert lines[2:] == ["a line of the user's", "E0000 00:00:1796336150.228545   17621 after.cc:1] written after the import"]
    # The user's own level: taken as it is, nothing dropped.
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    loud = subprocess.run([sys.executable, "-c", FAKE_USER], capture_output=True, text=True, env=env, timeout=120)
    assert loud.stdout == "0 0 SourceFileLoader []\n"
    assert loud.stderr.splitlines()[0] == "I0000 00:00:1796336150.228545   17621 port.cc:153] oneDNN custom operations are on."


FROZEN_USER = """
import gc, os, sys
from bert_keras._platform.native_log import freeze_tensorflow_import
if sys.argv[1] == "cli":
    freeze_tensorflow_import()
import keras  # as `bert-keras embed` does: Keras first, which imports TensorFlow, then its own optional parts
import tensorflow
import sklearn.base, matplotlib  # importable again afterwards, whoever the process is
print(gc.isenabled(), gc.get_freeze_count() > 0, os.environ.get("TF_CPP_MIN_LOG_LEVEL"), tensorflow.LEVEL,
      tensorflow.OPTIONAL, keras.OPTIONAL, sklearn.base.__name__)
"""
# What Keras does at its import (and inside TensorFlow's, which imports Keras too): scikit-learn and matplotlib where
# they import.
FAKE_KERAS_IMPORTS = """
OPTIONAL = []
for name in ("sklearn.base", "matplotlib"):
    try:
        __import__(name)
        OPTIONAL.append(name)
    except ImportError:
        pass
OPTIONAL = ",".join(OPTIONAL) or "-"
"""


@pytest.mark.parametrize("level", [None, "2"])
def test_the_command_lines_tensorflow_import_is_frozen_and_lean_and_the_apis_is_as_keras_makes_it(tmp_path, level):
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text(
        FAKE_TENSORFLOW + "GARBAGE = [[i] for i in range(1000)]\n" + FAKE_KERAS_IMPORTS)
    (tmp_path / "keras").mkdir()
    (tmp_path / "keras" / "__init__.py").write_text("import tensorflow\n" + FAKE_KERAS_IMPORTS)
    for package in ("sklearn", "matplotlib"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "sklearn" / "base.py").write_text("")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level  # the user's level: kept as it is, the import frozen all the same
    runs = {who: subprocess.run([sys.executable, "-c", FROZEN_USER, who], capture_output=True, text=True, env=env,
                                timeout=120) for who in ("cli", "api")}
    quiet = "3" if level is None else level
    # The command line's TensorFlow imports without scikit-learn and matplotlib, which import after it all the same;
    # the API's imports them as Keras asks.
    assert runs["cli"].stdout.split() == ["True", "True", str(level), quiet, "-", "-", "sklearn.base"], \
        runs["cli"].stderr
    both = "sklearn.base,matplotlib"
    assert runs["api"].stdout.split() == ["True", "False", str(level), quiet, both, both, "sklearn.base"], \
        runs["api"].stderr


def _functions_called(function, functions):
    """The names of the functions that `function` (a FunctionDef) calls, at any depth, itself included."""
    names, pending = set(), [function.signature.name]
    while pending:
        name = pending.pop()
        if name in names or name not in functions:
            continue
        names.add(name)
        for node in functions[name].node_def:
            for value in node.attr.values():
                pending += [value.func.name] + [f.name for f in value.list.func]
    return names


def test_the_exported_classifier_holds_no_assert_op_that_xla_would_ignore(folders):
    saved = saved_model_pb2.SavedModel()
    with open(folders / "clf" / "saved_model.pb", "rb") as f:
        saved.ParseFromString(f.read())
    functions = {function.signature.name: function for function in saved.meta_graphs[0].graph_def.library.function}
    compiled = [f for f in functions.values() if f.attr["_XlaMustCompile"].b]
    assert len(compiled) == 1  # the single-text path, compiled per length bucket
    under_xla = set().union(*(_functions_called(f, functions) for f in compiled))
    asserts = {name: [node.name for node in function.node_def if node.op == "Assert"] for name, function in functions.items()}
    assert [node for name in under_xla for node in asserts[name]] == []
    # Nor on the op-by-op path: the encoder's length check is no Assert anywhere (the preprocessor's ragged
    # tensors keep TensorFlow's own validation Asserts; no XLA runs them).
    assert [node for nodes in asserts.values() for node in nodes if "embeddings" in node or "encoder" in node] == []
    assert any(node.op == "CheckNumerics" and "embeddings" in node.name
               for name in under_xla for node in functions[name].node_def)
