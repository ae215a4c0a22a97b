"""Loading an export imports TensorFlow and tensorflow-text's ops, never Keras (nor what Keras imports with it).

Each check runs a fresh interpreter: what a process imported is only visible from a process that imported nothing
before. Keras stays whole for whoever imports it after (TensorFlow's own import of it is only deferred).
"""

import ast
import json
import os
import subprocess
import sys

import keras
import pytest

from bert_keras import BertEncoder
from bert_keras._platform import loading
from bert_keras.export import export_classifier, export_reader, export_sentence_encoder, export_tagger
from bert_keras.tasks import BertClassifier, BertSpanLabeler, BertTokenClassifier
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.text import BertPreprocessor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "the", "day"]
# Keras, and what Keras imports with itself where installed (its wrappers, plots and file editor).
HEAVY = ("keras", "tensorflow_text", "sklearn", "matplotlib", "IPython")


def _encoder():
    keras.utils.set_random_seed(3)
    return BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                       max_sequence_length=16)


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    model = BertClassifier(_encoder(), num_classes=2, preprocessor=BertPreprocessor(VOCAB, seq_length=16), dropout=0.0)
    return export_classifier(model, str(tmp_path_factory.mktemp("loader_imports") / "clf"), ["neg", "pos"])


# Each loader with its first answer, and the export it reads.
LOADERS = {
    "load_reader": "predict('good', 'the movie was good')['answer']",
    "load_sentence_encoder": "encode(['good movie']).shape[-1]",
    "load_tagger": "predict('good movie')",
}


@pytest.fixture(scope="module")
def other_exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader_imports_others")
    reader = BertSpanLabeler(_encoder(), preprocessor=BertPreprocessor(VOCAB, seq_length=16))
    sentences = SentenceEncoder(_encoder(), preprocessor=BertPreprocessor(VOCAB, seq_length=16))
    tagger = BertTokenClassifier(_encoder(), num_classes=3, preprocessor=BertPreprocessor(VOCAB, seq_length=16))
    return {"load_reader": export_reader(reader, str(root / "reader"), seq_length=16, doc_stride=4,
                                         max_question_length=4),
            "load_sentence_encoder": export_sentence_encoder(sentences, str(root / "sentences")),
            "load_tagger": export_tagger(tagger, str(root / "tagger"), ["O", "B-x", "I-x"])}


def _python(code):
    """The last line a fresh interpreter running `code` prints, read as JSON."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_load_classifier_and_its_first_answer_import_no_keras(classifier_dir):
    found = _python(
        "import json, sys\n"
        "from bert_keras.export import load_classifier\n"
        f"answer = load_classifier({classifier_dir!r}).predict('good movie')\n"
        f"print(json.dumps([answer['label'], [name for name in {HEAVY!r} if name in sys.modules]]))\n"
    )
    assert found[0] in ("neg", "pos")
    assert found[1] == [], f"loading a classifier export imported {found[1]}"


@pytest.mark.slow  # three exports and three fresh processes; the classifier's test keeps the fast loop's check
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_the_other_loaders_and_their_first_answers_import_no_keras(other_exports, loader):
    found = _python(
        "import json, sys\n"
        f"from bert_keras.export import {loader}\n"
        f"answer = {loader}({other_exports[loader]!r}).{LOADERS[loader]}\n"
        f"print(json.dumps([str(answer), [name for name in {HEAVY!r} if name in sys.modules]]))\n"
    )
    if loader == "load_reader":  # an untrained reader: some span of the context
        assert found[0] in "the movie was good", found
    elif loader == "load_tagger":  # an untrained tagger: a list of entities (dicts), maybe none
        assert found[0].startswith("["), found
    else:  # the encoder's hidden size, mean-pooled
        assert found[0] == "8", found
    assert found[1] == [], f"{loader} imported {found[1]}"


@pytest.mark.slow  # 10 s in the full run of 450d6b9
def test_keras_and_tensorflow_text_imported_after_a_load_are_whole(classifier_dir):
    found = _python(
        "import json, sys\n"
        "from bert_keras.export import load_classifier\n"
        f"loaded = load_classifier({classifier_dir!r}, warm_up=False)\n"
        "import keras, tensorflow as tf, tensorflow_text as tf_text\n"
        "dense = keras.layers.Dense(2)\n"
        "pieces = [p.decode() for p in tf_text.WhitespaceTokenizer().tokenize(['good movie']).to_list()[0]]\n"
        "print(json.dumps([type(dense).__name__, tf.keras.layers.Dense is keras.layers.Dense, pieces,\n"
        "                  'keras.src.optimizers' in sys.modules, loaded.predict(['good'])[0]['label'] is not None]))\n"
    )
    assert found == ["Dense", True, ["good", "movie"], True, True]


@pytest.mark.slow  # 7 s in the full run of 450d6b9
def test_tensorflow_imports_keras_by_itself_without_the_package():
    """What the deferral works around (`native_log`): TensorFlow 2.21's own import imports Keras. If an upgrade stops
    doing so, this fails, and the deferral can go."""
    found = _python("import json, sys\nimport tensorflow\nprint(json.dumps('keras' in sys.modules))\n")
    assert found is True


@pytest.mark.slow  # 6 s in the full run of 450d6b9
def test_tensorflow_after_the_package_imports_no_keras_and_keras_imports_it_first_as_before():
    found = _python(
        "import json, sys\n"
        "import bert_keras\n"
        "import tensorflow\n"
        "deferred = 'keras' not in sys.modules\n"
        "import keras\n"
        "print(json.dumps([deferred, keras.backend.backend()]))\n"
    )
    assert found == [True, "tensorflow"]


def test_tensorflow_text_loads_its_op_libraries_where_register_text_ops_looks():
    """`register_text_ops` loads by path the libraries tensorflow-text's own modules load (`python/ops/_*.so`)."""
    libraries = loading.text_op_libraries()
    folder = os.path.dirname(libraries[0])
    loaded_by_its_modules = set()
    for name in os.listdir(folder):
        if name.endswith(".py"):
            for node in ast.walk(ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".so"):
                    loaded_by_its_modules.add(node.value)
    assert sorted(os.path.basename(path) for path in libraries) == sorted(loaded_by_its_modules)
    assert {"_fast_wordpiece_tokenizer.so", "_regex_split_ops.so", "_normalize_ops.so"} <= loaded_by_its_modules
