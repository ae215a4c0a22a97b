import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import BertPreprocessor, WordPieceTokenizer, preprocess_dataset

KEYS = ["input_mask", "input_type_ids", "input_word_ids"]


def _numpy(outputs):
    return {key: np.asarray(value).tolist() for key, value in outputs.items()}


def test_single_texts_and_pairs(tiny_vocab):
    preprocessor = BertPreprocessor(tiny_vocab, seq_length=8)
    out = _numpy(preprocessor(tf.constant(["The quick fox!", ""])))
    assert out == {
        "input_word_ids": [[2, 5, 6, 7, 9, 10, 3, 0], [2, 3, 0, 0, 0, 0, 0, 0]],
        "input_mask": [[1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0, 0, 0]],
        "input_type_ids": [[0] * 8, [0] * 8],
    }
    out = _numpy(preprocessor([tf.constant(["the quick"]), tf.constant(["brown fox"])]))
    assert out["input_word_ids"] == [[2, 5, 6, 7, 3, 8, 9, 3]]
    assert out["input_type_ids"] == [[0, 0, 0, 0, 0, 1, 1, 1]]


def test_hub_style_methods(tiny_vocab):
    preprocessor = BertPreprocessor(tiny_vocab, seq_length=8)
    tokens = preprocessor.tokenize(tf.constant(["the quick", "fox"]))
    assert tokens.to_list() == [[[5], [6, 7]], [[9]]]
    packed = preprocessor.bert_pack_inputs([tokens, tokens], seq_length=6)
    assert packed["input_word_ids"].numpy().tolist() == [[2, 5, 6, 3, 5, 3], [2, 9, 3, 9, 3, 0]]
    assert preprocessor.get_special_tokens_dict()["mask_id"] == 4


def test_bad_inputs(tiny_vocab):
    preprocessor = BertPreprocessor(tiny_vocab, seq_length=8)
    out = _numpy(preprocessor(tf.constant(["", " \t\n ", "\x00\x01\u200b", b"\xff\xfe"])))
    assert out["input_word_ids"] == [[2, 3, 0, 0, 0, 0, 0, 0]] * 4
    assert out["input_mask"] == [[1, 1, 0, 0, 0, 0, 0, 0]] * 4
    out = preprocessor(tf.constant([], tf.string))
    assert {key: (tuple(value.shape), value.dtype) for key, value in out.items()} == dict.fromkeys(
        KEYS, ((0, 8), tf.int32)
    )
    long = _numpy(preprocessor(tf.constant(["the fox " * 50_000])))  # 400,000 characters
    assert long["input_word_ids"] == [[2, 5, 9, 5, 9, 5, 9, 3]] and long["input_mask"] == [[1] * 8]
    with pytest.raises(TypeError, match=r"`inputs`, expected a tensor of dtype string.*dtype=int32"):
        preprocessor(tf.constant([1, 2]))
    with pytest.raises(TypeError, match=r"`inputs\[1\]`.*dtype=float32"):
        preprocessor([tf.constant(["a"]), tf.constant([1.0])])
    with pytest.raises(ValueError, match="a scalar string; wrap it in a list"):
        preprocessor(tf.constant("the fox"))
    with pytest.raises(ValueError, match="Received: a dict with keys"):
        preprocessor({"text": tf.constant(["a"])})


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_tokenization_and_packing_are_traced_once_for_every_function_that_preprocesses(tiny_vocab, tmp_path):
    """Each function that preprocesses (train step, eval step, serving signatures) calls the same two traced
    functions: tracing a third function adds no tracing of tokenization or packing, and the result is equal."""
    preprocessor = BertPreprocessor(tiny_vocab, seq_length=8)
    texts = tf.constant(["The quick fox!", "naïve café \u200b"])
    eager = _numpy(preprocessor(texts))
    outputs = []
    for _ in range(3):
        function = tf.function(lambda x: preprocessor(x), autograph=False)  # noqa: PLW0108 - a new function each time
        outputs.append(_numpy(function(texts)))
    assert outputs == [eager] * 3
    tokenize_rows = preprocessor.tokenizer._traced.tokenize_rows
    assert tokenize_rows.experimental_get_tracing_count() == 1
    packers = list(preprocessor._traced_packing._functions.values())
    assert len(packers) == 1 and packers[0].experimental_get_tracing_count() == 1
    # The helpers are not functions of the layer: a SavedModel of a module holding it exports none of them.
    module = tf.Module()
    module.preprocessor = preprocessor
    module.serve = tf.function(lambda x: preprocessor(x), input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert _numpy(loaded.serve(texts)) == eager
    assert not hasattr(loaded.preprocessor, "_traced") and not hasattr(loaded.preprocessor, "_traced_packing")


def test_constructor_errors(tiny_vocab):
    with pytest.raises(ValueError, match="exactly one of the arguments `vocabulary` and `tokenizer`"):
        BertPreprocessor()
    with pytest.raises(ValueError, match=r"`seq_length`, expected an integer >= 2. Received: seq_length=0"):
        BertPreprocessor(tiny_vocab, seq_length=0)
    with pytest.raises(ValueError, match=r"`truncation`"):
        BertPreprocessor(tiny_vocab, truncation="longest_first")
    with pytest.raises(ValueError, match=r"`tokenizer`, expected a WordPieceTokenizer"):
        BertPreprocessor(tokenizer="bert")


@pytest.mark.slow
def test_functional_model_keras_round_trip_and_export(tiny_vocab, tmp_path):
    preprocessor = BertPreprocessor(tiny_vocab, lower_case=False, seq_length=6)
    text = keras.Input(shape=(), dtype="string", name="text")
    outputs = preprocessor(text)
    assert {key: (tuple(value.shape), value.dtype) for key, value in outputs.items()} == dict.fromkeys(
        KEYS, ((None, 6), "int32")
    )
    model = keras.Model(text, outputs)
    data = tf.constant(["Hello the fox", "the"])
    expected = _numpy(model(data))
    assert expected["input_word_ids"] == [[2, 22, 5, 9, 3, 0], [2, 5, 3, 0, 0, 0]]

    path = str(tmp_path / "preprocess.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert _numpy(restored(data)) == expected
    layer = restored.layers[-1]
    assert isinstance(layer, BertPreprocessor) and layer.lower_case is False and layer.seq_length == 6

    model.export(str(tmp_path / "exported"))
    served = tf.saved_model.load(str(tmp_path / "exported")).serve(data)
    assert _numpy(served) == expected


def test_two_text_inputs_in_a_functional_model(tiny_vocab):
    preprocessor = BertPreprocessor(tiny_vocab, seq_length=7)
    a, b = keras.Input(shape=(), dtype="string"), keras.Input(shape=(), dtype="string")
    model = keras.Model([a, b], preprocessor([a, b]))
    out = _numpy(model([tf.constant(["the quick"]), tf.constant(["fox"])]))
    assert out["input_word_ids"] == [[2, 5, 6, 7, 3, 9, 3]]
    assert out["input_type_ids"] == [[0, 0, 0, 0, 0, 1, 1]]


def test_config_round_trip_keeps_the_tokenizer(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab, lower_case=False)
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=16, truncation="waterfall")
    restored = BertPreprocessor.from_config(preprocessor.get_config())
    assert restored.tokenizer.get_config() == tokenizer.get_config()
    assert restored.seq_length == 16 and restored.truncation == "waterfall"


@pytest.mark.slow
def test_preprocess_dataset_single_and_pairs(tiny_vocab):
    preprocessor = BertPreprocessor(tiny_vocab, seq_length=5)
    ds = tf.data.Dataset.from_tensor_slices((["the fox", "quick", "fox"], [1, 0, 1]))
    batches = list(preprocess_dataset(ds, preprocessor, batch_size=2))
    assert len(batches) == 2
    features, labels = batches[0]
    assert features["input_word_ids"].numpy().tolist() == [[2, 5, 9, 3, 0], [2, 6, 7, 3, 0]]
    assert labels.numpy().tolist() == [1, 0]
    pairs = tf.data.Dataset.from_tensor_slices(((["the"], ["fox"]), [1]))
    features, _ = next(iter(preprocess_dataset(pairs, preprocessor, batch_size=4)))
    assert features["input_type_ids"].numpy().tolist() == [[0, 0, 0, 1, 1]]
    texts_only = tf.data.Dataset.from_tensor_slices(["fox"])
    assert next(iter(preprocess_dataset(texts_only, preprocessor)))["input_word_ids"].shape == (1, 5)
    with pytest.raises(ValueError, match=r"`batch_size`.*Received: batch_size=0"):
        preprocess_dataset(ds, preprocessor, batch_size=0)


@pytest.mark.slow
def test_fit_step_through_the_preprocessor(tiny_vocab):
    preprocessor = BertPreprocessor(tiny_vocab, seq_length=6)
    text = keras.Input(shape=(), dtype="string")
    ids = preprocessor(text)["input_word_ids"]
    logits = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(24, 4)(ids)))
    model = keras.Model(text, logits)
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = preprocess_dataset(tf.data.Dataset.from_tensor_slices((["the fox", "quick"], [1, 0])), lambda x: x, 2)
    history = model.fit(ds, epochs=1, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"][0])


def test_real_vocabulary_equals_the_reference_on_tweets(vocab_path, hf_uncased, tweets):
    preprocessor = BertPreprocessor(vocab_path, seq_length=128)
    texts = tweets[:3000]
    out = _numpy(preprocessor(tf.constant(texts)))
    expected = hf_uncased(texts, truncation=True, max_length=128, padding="max_length")
    assert out["input_word_ids"] == expected["input_ids"]
    assert out["input_mask"] == expected["attention_mask"]
    assert out["input_type_ids"] == expected["token_type_ids"]
