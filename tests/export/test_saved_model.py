"""export_classifier's serving path (padding cut, XLA length buckets at batch 1) and its bfloat16 exports."""

import contextlib
import json
import os
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder, dtypes
from bert_keras.export import _serving as serving
from bert_keras.export import classifier as saved_model
from bert_keras.export import export_classifier, export_litert, export_module_pair, load_classifier, load_litert
from bert_keras.export.manifest import read_manifest
from bert_keras.tasks import BertClassifier
from bert_keras.tasks import classifier as classifier_task
from bert_keras.text import BertPreprocessor

WORDS = ["good", "great", "fun", "bad", "awful", "boring", "movie", "the", "was", "plot"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"w{i}" for i in range(25)]
TINY = dict(vocab_size=len(VOCAB), num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=128)
LABELS = ["neg", "neu", "pos"]
# Token counts 4, 62, 100 (cut) and 2: the length buckets 8 and 64, and the op-by-op path.
TEXTS = ["good movie", "w1 w2 w3 " * 20, "fun " * 200, ""]


@pytest.fixture(scope="module")
def classifier():
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0)
    return BertClassifier(encoder, num_classes=3, preprocessor=BertPreprocessor(VOCAB, seq_length=100), dropout=0.0)


@pytest.fixture(scope="module")
def expected(classifier):
    return tf.nn.softmax(classifier(tf.constant(TEXTS))).numpy()  # the in-memory model, padded to 100


@pytest.fixture(scope="module")
def fp32_export(classifier, tmp_path_factory):
    return export_classifier(classifier, str(tmp_path_factory.mktemp("fp32") / "classifier"), LABELS, xla=True)


@pytest.mark.slow
def test_serving_equals_the_model_one_text_at_a_time_and_in_batches(fp32_export, expected):
    loaded = load_classifier(fp32_export)
    one_at_a_time = np.concatenate([loaded.predict_proba([text]) for text in TEXTS])
    np.testing.assert_allclose(one_at_a_time, expected, atol=1e-6)
    np.testing.assert_allclose(loaded.predict_proba(TEXTS), expected, atol=1e-6)
    np.testing.assert_allclose(loaded.predict_proba(TEXTS[:2]), expected[:2], atol=1e-6)  # the longest row is 62
    predictions = loaded.predict(TEXTS)  # the last text is blank: no label, as `bert-keras predict` prints it
    assert [p["label"] for p in predictions[:-1]] == [LABELS[i] for i in expected[:-1].argmax(-1)]
    assert predictions[-1] == {"label": None, "score": None, "scores": {}} == loaded.predict(" \t")


@pytest.mark.slow
def test_single_texts_run_an_xla_compiled_function(fp32_export):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(fp32_export, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    library = proto.meta_graphs[0].graph_def.library.function
    compiled = [f.signature.name for f in library if f.attr["_XlaMustCompile"].b]
    assert len(compiled) == 1 and "classify" in compiled[0], compiled
    manifest = read_manifest(fp32_export)
    assert manifest.pop("tokenizer")["seq_length"] > 0
    assert manifest == {"format": "bert_keras export", "version": 2, "kind": "classifier",
                                          "label_names": LABELS, "inputs": ["text"], "dtype": "float32"}


def test_padding_is_cut_after_the_longest_row_and_buckets_round_up():
    mask = tf.constant([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    packed = {"input_word_ids": mask * 7, "input_mask": mask, "input_type_ids": tf.zeros_like(mask)}
    trimmed = serving.trim_padding(packed)
    assert trimmed["input_word_ids"].numpy().tolist() == [[7, 7, 7, 0, 0], [7, 7, 7, 7, 7]]
    assert serving.trim_padding({k: v[:, :0] + 0 for k, v in packed.items()})["input_mask"].shape == (2, 0)
    padded = serving.pad_to(trimmed, tf.constant(16))
    assert padded["input_mask"].shape == (2, 16) and int(tf.reduce_sum(padded["input_mask"])) == 8
    assert [int(serving.bucket(tf.constant(n))) for n in (1, 8, 9, 17, 33, 48, 49, 64)] == [8, 8, 16, 24, 40, 48, 56, 64]


@pytest.mark.slow
def test_float32_and_bfloat16_exports_of_a_classifier_on_hub_layers(tmp_path, monkeypatch):
    monkeypatch.setattr(dtypes, "cpu_supports_bfloat16", lambda: True)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    keras.utils.set_random_seed(4)
    encoder = BertEncoder(**dict(TINY, max_sequence_length=24), dropout=0.0, attention_dropout=0.0)
    export_module_pair(str(tmp_path / "modules"), encoder, str(vocab), do_lower_case=True, seq_length=12)
    on_hub = BertClassifier.from_checkpoint(str(tmp_path / "modules"), num_classes=3, seq_length=12, dropout=0.0)
    for variable in on_hub.encoder.trainable_weights[:3]:  # as fine-tuning does: the layer's weights move
        variable.assign(variable + 0.01)
    expected = tf.nn.softmax(on_hub(tf.constant(TEXTS))).numpy()
    native = on_hub.with_native_encoder()
    # The module pair bert_keras wrote records its tokenizer: the copy packs with the equal BertPreprocessor.
    assert isinstance(native.encoder, BertEncoder) and isinstance(native.preprocessor, BertPreprocessor)
    assert native.preprocessor.seq_length == 12 and native.preprocessor.tokenizer.vocabulary == VOCAB
    np.testing.assert_allclose(tf.nn.softmax(native(tf.constant(TEXTS))).numpy(), expected, atol=1e-6)

    # float32: served on the equal BertEncoder (single texts under XLA, the last block for [CLS] only).
    rebuilt = []
    with monkeypatch.context() as patch:
        native_copy = BertClassifier.with_native_encoder
        patch.setattr(BertClassifier, "with_native_encoder", lambda m: rebuilt.append(native_copy(m)) or rebuilt[-1])
        fp32 = load_classifier(export_classifier(on_hub, str(tmp_path / "fp32"), LABELS), warm_up=False)
    assert len(rebuilt) == 1 and isinstance(rebuilt[0].encoder, BertEncoder)
    np.testing.assert_allclose(np.concatenate([fp32.predict_proba([text]) for text in TEXTS]), expected, atol=1e-6)
    np.testing.assert_allclose(fp32.predict_proba(TEXTS), expected, atol=1e-6)
    # ... so its export records how it tokenizes, and LiteRT converts it (issue 56: the seed's workflow on LiteRT).
    tokenizer = read_manifest(os.path.join(tmp_path, "fp32"))["tokenizer"]
    assert (tokenizer["kind"], tokenizer["seq_length"], tokenizer["lower_case"]) == ("wordpiece", 12, True)
    lite = load_litert(export_litert(str(tmp_path / "fp32"), str(tmp_path / "fp32.tflite")))
    np.testing.assert_allclose(lite.predict_proba(TEXTS), expected, atol=1e-5)
    assert [answer["label"] for answer in lite.predict(TEXTS[:2])] == [LABELS[i] for i in expected[:2].argmax(-1)]
    # A module that cannot be rebuilt (here: its checkpoint unreadable) is served through its own graph.
    with monkeypatch.context() as patch:
        patch.setattr(classifier_task, "load", lambda *a, **k: (_ for _ in ()).throw(ValueError("unreadable")))
        own = load_classifier(export_classifier(on_hub, str(tmp_path / "own_graph"), LABELS), warm_up=False)
    np.testing.assert_allclose(np.concatenate([own.predict_proba([text]) for text in TEXTS]), expected, atol=1e-6)

    loaded = load_classifier(export_classifier(on_hub, str(tmp_path / "bf16"), LABELS, dtype="bfloat16"), warm_up=False)
    _, specs = loaded._signature.structured_input_signature
    assert {name: spec.dtype for name, spec in specs.items()} == {"text": tf.string}
    assert loaded._signature.structured_outputs["probabilities"].dtype == tf.float32
    probabilities = loaded.predict_proba(TEXTS)
    difference = float(np.max(np.abs(probabilities - expected)))
    assert 1e-6 < difference < 0.02, difference  # bfloat16 arithmetic: near the float32 model, not equal to it
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    assert read_manifest(os.path.join(tmp_path, "bf16"))["dtype"] == "bfloat16"


def test_bfloat16_export_refusals(classifier, tmp_path, monkeypatch):
    monkeypatch.setattr(dtypes, "cpu_supports_bfloat16", lambda: False)
    with pytest.raises(ValueError, match=r"dtype='bfloat16', but this CPU has no bfloat16 arithmetic"):
        export_classifier(classifier, str(tmp_path / "refused"), LABELS, dtype="bfloat16")
    monkeypatch.setattr(dtypes, "cpu_supports_bfloat16", lambda: True)
    text = keras.Input(shape=(4,))
    plain = keras.Model(text, keras.layers.Dense(3)(text))
    with pytest.raises(ValueError, match=r"type Functional; only a BertClassifier can be exported in bfloat16"):
        export_classifier(plain, str(tmp_path / "plain"), LABELS, dtype="bfloat16")
    with pytest.raises(ValueError, match=r"`dtype`, expected one of \['float32', 'bfloat16'\]. Received: dtype='int8'"):
        export_classifier(classifier, str(tmp_path / "int8"), LABELS, dtype="int8")
    assert os.listdir(tmp_path) == []


def _stored_values(export_dir):
    """The number of values the SavedModel's checkpoint holds (its object graph left out)."""
    names = tf.train.list_variables(os.path.join(export_dir, "variables", "variables"))
    return sum(int(np.prod(shape)) for name, shape in names if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH"))


@pytest.mark.slow  # over 3 s: the whole suite runs it, the fast loop does not
def test_exports_hold_each_weight_once(tmp_path):
    from bert_keras.export import export_sentence_encoder
    from bert_keras.tasks.sentence_encoder import SentenceEncoder

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
    encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64)
    model = BertClassifier(encoder, 3, preprocessor=BertPreprocessor(vocab, seq_length=16))
    export_classifier(model, str(tmp_path / "clf"), ["a", "b", "c"])
    embedder = SentenceEncoder(encoder, BertPreprocessor(vocab, seq_length=16))
    export_sentence_encoder(embedder, str(tmp_path / "embedder"))
    for export, built in ((tmp_path / "clf", model), (tmp_path / "embedder", embedder)):
        weights = built.count_params()
        state = sum(int(np.prod(v.shape)) for v in built.variables) - weights  # dropout's seed state: a few values
        assert _stored_values(str(export)) == weights + state, export  # Keras' archive alone stores them twice
    loaded = load_classifier(str(tmp_path / "clf"), warm_up=False)
    np.testing.assert_allclose(loaded.predict_proba(["w1 w2", "w3"]),
                               tf.nn.softmax(model(tf.constant(["w1 w2", "w3"]))).numpy(), atol=1e-6)


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_the_models_own_label_names_are_exported_and_a_keras_file_is_refused_with_the_way(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
    encoder = BertEncoder(vocab_size=40, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16)
    model = BertClassifier(encoder, 2, preprocessor=BertPreprocessor(vocab, seq_length=8), label_names=["no", "yes"])
    export_classifier(model, str(tmp_path / "clf"))
    loaded = load_classifier(str(tmp_path / "clf"), warm_up=False)
    assert loaded.label_names == ["no", "yes"] and loaded.label_source == "export"
    served, in_memory = loaded.predict(["w1 w2", ""]), model.predict_labels(["w1 w2", ""])
    assert served[0]["label"] == in_memory[0]["label"] and served[1] == in_memory[1]
    assert served[0]["scores"] == pytest.approx(in_memory[0]["scores"], abs=1e-6)
    with pytest.raises(ValueError, match=r"Received no `label_names`, and the model carries none"):
        export_classifier(BertClassifier(encoder, 2, preprocessor=BertPreprocessor(vocab, seq_length=8)), str(tmp_path / "x"))
    model.save(tmp_path / "clf.keras")
    with pytest.raises(ValueError, match=r"is a Keras model file, not an export\. Load it with `keras\.saving\.load_model"):
        load_classifier(str(tmp_path / "clf.keras"))


@pytest.mark.slow  # over 3 s: the whole suite runs it, the fast loop does not
def test_the_export_carries_tf_servings_warm_up_requests_and_the_loader_replays_them(fp32_export, classifier, monkeypatch,
                                                                                     tmp_path):
    import shutil

    from tensorflow_serving.apis import prediction_log_pb2

    from bert_keras.export import warmup

    path = os.path.join(fp32_export, "assets.extra", "tf_serving_warmup_requests")
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    logs = [prediction_log_pb2.PredictionLog.FromString(record) for record in records]  # TF Serving's own protos
    assert all(log.predict_log.request.model_spec.signature_name == "serving_default" for log in logs)
    requests = warmup.read_warmup_requests(path)
    assert [list(r) for r in requests] == [["text"]] * len(requests)
    lengths = [int(np.sum(classifier.preprocessor(tf.constant(r["text"]))["input_mask"])) for r in requests[:-1]]
    assert lengths == [8, 16, 24, 32, 40, 48, 56, 64]  # one single text per XLA bucket (seq_length 100 holds them all)
    assert len(requests[-1]["text"]) == warmup.BATCH  # and one batch, for the op-by-op path

    replayed = []
    monkeypatch.setattr(warmup, "read_warmup_requests", lambda p: replayed.append(p) or requests)
    loaded = load_classifier(fp32_export, warm_up=True)
    assert replayed == [path] and loaded.warm_up_seconds > 0 and loaded.warmed.is_set()
    cold = load_classifier(fp32_export, warm_up=False)
    assert cold.warm_up_seconds == 0 and replayed == [path]
    # By default the requests replay in a thread, and the first texts are answered by `serve_plain` (no compile).
    background = load_classifier(fp32_export)
    # Loaded without the compiled path, which the warm-up loads and compiles in its thread.
    assert background.left_out == ("__call__", "serve", "serving_default") and not hasattr(background._saved, "serve")
    calls = []
    plain = background._saved.serve_plain
    monkeypatch.setattr(background._saved, "serve_plain", lambda *texts: calls.append(len(texts)) or plain(*texts),
                        raising=False)
    first = background.predict_proba(TEXTS[:1])
    assert background.warmed.wait(120) and background.warm_up_seconds > 0 and replayed == [path, path]
    assert calls in ([1], [])  # the first text took the plain path unless the warm-up had already ended
    np.testing.assert_allclose(first, background.predict_proba(TEXTS[:1]), atol=1e-5)  # the same outputs by XLA
    assert background.left_out == () and "serving_default" in background._saved.signatures
    # Without a warm-up, `serve_plain` alone, for good; a signature asked for by name loads the rest.
    assert cold.left_out == ("__call__", "serve", "serving_default")
    np.testing.assert_allclose(cold.predict_proba(TEXTS[:1]), first, atol=1e-5)
    assert cold.left_out and not hasattr(cold._saved, "serve")
    # (Where a warm-up has loaded the whole SavedModel and not yet swapped it in, that one is taken, not a third.)
    cold._warming, _ = cold._load(())
    whole = cold._warming
    np.testing.assert_allclose(cold.run("serving_default", text=TEXTS[:1])["probabilities"], first, atol=1e-5)
    assert cold.left_out == () and cold._saved is whole and hasattr(whole, "serve")
    with pytest.raises(ValueError, match="expected True, False or \"background\". Received: warm_up='yes'"):
        load_classifier(fp32_export, warm_up="yes")
    monkeypatch.undo()
    damaged = shutil.copytree(fp32_export, tmp_path / "damaged")
    with open(damaged / "assets.extra" / "tf_serving_warmup_requests", "wb") as f:  # a warning; it still serves
        f.write(b"not a record")
    broken = load_classifier(str(damaged))
    assert broken.predict("good movie")["label"] in LABELS


@pytest.mark.slow  # 25 s in the full run of 450d6b9
def test_requests_before_the_background_warm_up_run_the_graph_without_its_rewrites(fp32_export, monkeypatch):
    # A first call waits for TensorFlow's graph rewrites (Grappler): the requests before the background warm-up has
    # ended skip them; the warm-up builds the rewritten graph, which the requests after it run.
    from bert_keras.export import loaded as loaded_module

    entered, real = [], loaded_module.functions_unoptimized

    @contextlib.contextmanager
    def recorded():
        entered.append(threading.current_thread().name)
        with real():
            yield

    monkeypatch.setattr(loaded_module, "functions_unoptimized", recorded)
    background = load_classifier(fp32_export)
    instantiated, instantiate = [], background._instantiate
    monkeypatch.setattr(background, "_instantiate",
                        lambda: instantiated.append(threading.current_thread().name) or instantiate())
    first = background.predict_proba(TEXTS[:2])
    here = threading.current_thread().name
    assert entered == [here]  # the first request, in the caller's thread, as loaded
    assert background.warmed.wait(120) and instantiated == [f"warm-up of {fp32_export}"]
    np.testing.assert_allclose(first, background.predict_proba(TEXTS[:2]), atol=1e-5)
    assert entered == [here]  # after the warm-up: the rewritten graph
    load_classifier(fp32_export, warm_up=False).predict_proba(TEXTS[:1])
    load_classifier(fp32_export, warm_up=True).predict_proba(TEXTS[:1])
    assert entered == [here]  # without a background warm-up, every request takes the rewritten graph



@pytest.mark.slow  # 9 s in the full run of 450d6b9
def test_the_loaded_export_is_callable_on_strings_as_keras_2_savedmodels_were(fp32_export, classifier, expected, tmp_path):
    logits = classifier(tf.constant(TEXTS)).numpy()
    np.testing.assert_allclose(tf.saved_model.load(fp32_export)(tf.constant(TEXTS)).numpy(), logits, atol=1e-5)
    # The TF Hub workflow's kind of model: any functional model from strings, here a softmax on top.
    inputs = keras.Input(shape=(), dtype="string", name="text")
    workflow = keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(classifier(inputs)))
    export_classifier(workflow, str(tmp_path / "workflow"), LABELS)
    loaded = tf.saved_model.load(str(tmp_path / "workflow"))
    np.testing.assert_allclose(loaded(tf.constant(TEXTS[:2])).numpy(), expected[:2], atol=1e-5)
    assert [p["label"] for p in load_classifier(str(tmp_path / "workflow"), warm_up=False).predict(TEXTS[:2])] == \
        [LABELS[i] for i in expected[:2].argmax(-1)]
