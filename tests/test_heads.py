import math

import keras
import numpy as np
import pytest

from bert_keras import BertEncoder
from bert_keras.heads import (
    ClassificationHead,
    MaskedLMHead,
    NextSentenceHead,
    SentencePooling,
    SpanHead,
    TokenClassificationHead,
)
from bert_keras.tasks.pretrainer import BertPretrainer
from tests.helpers import assert_close, run_layer_test

TINY = dict(vocab_size=30, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=16)


def _pretrainer_inputs(batch=2, seq=8, predictions=3, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, TINY["vocab_size"], size=(batch, seq)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    ids = ids * mask
    return {
        "input_word_ids": ids,
        "input_mask": mask,
        "input_type_ids": (np.arange(seq)[None, :] >= 4).astype("int32").repeat(batch, 0) * mask,
        "masked_lm_positions": np.array([[1, 2, 6], [0, 3, 4]], dtype="int32")[:batch, :predictions],
    }


def _layer_norm(x, gamma, beta, epsilon=1e-12):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def test_masked_lm_head_layer(tmp_path):
    rng = np.random.default_rng(0)
    sequence = rng.normal(size=(2, 7, 16)).astype("float32")
    positions = np.array([[1, 3, 6], [0, 2, 2]], dtype="int32")
    # transform (16*16 + 16) + LayerNorm (2*16) + untied table (30*16) + output bias (30)
    run_layer_test(
        MaskedLMHead,
        {"vocab_size": 30, "activation": "gelu", "layer_norm_epsilon": 1e-12},
        [sequence, positions],
        expected_output_shape=(2, 3, 30),
        expected_num_trainable_weights=6,
        expected_num_params=16 * 16 + 16 + 32 + 30 * 16 + 30,
        tmp_path=tmp_path,
    )


def test_next_sentence_head_layer(tmp_path):
    pooled = np.random.default_rng(0).normal(size=(4, 16)).astype("float32")
    run_layer_test(
        NextSentenceHead,
        {"num_classes": 2},
        pooled,
        expected_output_shape=(4, 2),
        expected_num_trainable_weights=2,
        expected_num_params=16 * 2 + 2,
        tmp_path=tmp_path,
    )


def test_tied_masked_lm_head_matches_numpy():
    embedding = keras.layers.Embedding(30, 16)
    embedding.build((None,))
    head = MaskedLMHead(vocab_size=30, embedding=embedding, activation="gelu")
    rng = np.random.default_rng(1)
    sequence = rng.normal(size=(2, 7, 16)).astype("float32")
    positions = np.array([[1, 3, 6], [0, 2, 2]], dtype="int32")
    head(sequence, positions)
    for variable in head.trainable_weights:
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    logits = np.asarray(head(sequence, positions))

    gathered = np.take_along_axis(sequence, positions[:, :, None], axis=1)  # (2, 3, 16)
    x = gathered @ head.transform_dense.kernel.numpy() + head.transform_dense.bias.numpy()
    x = 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))  # exact GELU
    x = _layer_norm(x, head.layer_norm.gamma.numpy(), head.layer_norm.beta.numpy())
    expected = x @ embedding.embeddings.numpy().T + head.output_bias.numpy()
    assert_close(logits, expected, atol=1e-5)

    # Tied: the head owns no table of its own, and follows the embedding.
    assert not hasattr(head, "decoder_embeddings")
    embedding.embeddings.assign(np.zeros((30, 16), "float32"))
    assert_close(head(sequence, positions), np.broadcast_to(head.output_bias.numpy(), (2, 3, 30)))


def test_masked_lm_head_without_positions_scores_every_token():
    head = MaskedLMHead(vocab_size=11)
    assert head(np.zeros((2, 5, 8), "float32")).shape == (2, 5, 11)


def test_head_argument_errors():
    embedding = keras.layers.Embedding(20, 16)
    with pytest.raises(ValueError, match="vocab_size"):
        MaskedLMHead(vocab_size=30, embedding=embedding)
    with pytest.raises(ValueError, match="vocab_size"):
        MaskedLMHead(vocab_size=0)
    with pytest.raises(ValueError, match="activation"):
        MaskedLMHead(vocab_size=30, activation="swishy")
    with pytest.raises(ValueError, match="num_classes"):
        NextSentenceHead(num_classes=0)
    with pytest.raises(ValueError, match="encoder"):
        BertPretrainer(keras.layers.Dense(3))


def test_pretrainer_outputs_and_shared_weights():
    encoder = BertEncoder(**TINY)
    pretrainer = BertPretrainer(encoder)
    assert pretrainer.encoder is encoder
    assert pretrainer.mlm_head.embedding is encoder.embeddings.word_embeddings
    inputs = _pretrainer_inputs()
    outputs = pretrainer(inputs)
    assert outputs["mlm_logits"].shape == (2, 3, 30)
    assert outputs["nsp_logits"].shape == (2, 2)
    # The word-embedding table is counted once: the heads add transform, LayerNorm,
    # output bias and the 2-way dense only.
    head_params = (16 * 16 + 16) + 2 * 16 + 30 + (16 * 2 + 2)
    assert pretrainer.count_params() == encoder.count_params() + head_params

    encoded = encoder({k: inputs[k] for k in ("input_word_ids", "input_mask", "input_type_ids")})
    assert_close(outputs["mlm_logits"], pretrainer.mlm_head(encoded["sequence_output"], inputs["masked_lm_positions"]))
    assert_close(outputs["nsp_logits"], pretrainer.nsp_head(encoded["pooled_output"]))
    assert pretrainer.mlm_head.activation == "gelu"


@pytest.mark.slow
def test_pretrainer_keras_round_trip_and_fit(tmp_path):
    encoder = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0, activation="gelu_approximate")
    pretrainer = BertPretrainer(encoder, layer_norm_epsilon=1e-6)
    inputs = _pretrainer_inputs()
    config = pretrainer.get_config()
    assert config["layer_norm_epsilon"] == 1e-6 and config["mlm_activation"] is None
    assert pretrainer.mlm_head.activation == "gelu_approximate"

    pretrainer.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss={
            "mlm_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "nsp_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        },
    )
    targets = {"mlm_logits": np.array([[5, 6, 7], [8, 9, 10]]), "nsp_logits": np.array([0, 1])}
    before = pretrainer.evaluate(inputs, targets, verbose=0)[0]
    pretrainer.fit(inputs, targets, epochs=3, batch_size=2, verbose=0)
    after = pretrainer.evaluate(inputs, targets, verbose=0)[0]
    assert after < before

    path = str(tmp_path / "pretrainer.keras")
    pretrainer.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, BertPretrainer) and isinstance(restored.encoder, BertEncoder)
    assert restored.mlm_head.embedding is restored.encoder.embeddings.word_embeddings
    expected, actual = pretrainer.predict(inputs, verbose=0), restored.predict(inputs, verbose=0)
    for key in ("mlm_logits", "nsp_logits"):
        np.testing.assert_array_equal(actual[key], expected[key])


def test_classification_head_layer(tmp_path):
    pooled = np.random.default_rng(0).normal(size=(4, 16)).astype("float32")
    head, _ = run_layer_test(
        ClassificationHead,
        {"num_classes": 3, "dropout": 0.2},
        pooled,
        expected_output_shape=(4, 3),
        expected_num_trainable_weights=2,
        expected_num_params=16 * 3 + 3,
        tmp_path=tmp_path,
    )
    # Without training, dropout is off: logits = pooled @ kernel + bias.
    expected = pooled @ head.dense.kernel.numpy() + head.dense.bias.numpy()
    assert_close(head(pooled), expected, atol=1e-5)
    # In training, dropout zeroes some inputs and scales the rest by 1 / (1 - 0.2).
    assert not np.allclose(np.asarray(head(pooled, training=True)), expected)


def test_token_classification_head_layer(tmp_path):
    sequence = np.random.default_rng(0).normal(size=(2, 7, 16)).astype("float32")
    head, output = run_layer_test(
        TokenClassificationHead,
        {"num_classes": 5, "dropout": 0.1},
        sequence,
        expected_output_shape=(2, 7, 5),
        expected_num_trainable_weights=2,
        expected_num_params=16 * 5 + 5,
        tmp_path=tmp_path,
    )
    assert_close(output, sequence @ head.dense.kernel.numpy() + head.dense.bias.numpy(), atol=1e-5)
    assert head.get_config()["dropout"] == 0.1


def test_span_head_masks_to_the_context(tmp_path):
    rng = np.random.default_rng(0)
    sequence = rng.normal(size=(2, 6, 16)).astype("float32")
    context = np.array([[0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 1, 1]], "int32")
    head = SpanHead()
    start, end = head(sequence, context)
    assert start.shape == end.shape == (2, 6)
    assert len(head.trainable_weights) == 2 and head.count_params() == 16 * 2 + 2
    raw = sequence @ head.dense.kernel.numpy() + head.dense.bias.numpy()  # (2, 6, 2)
    allowed = context.astype(bool)
    assert_close(np.asarray(start)[allowed], raw[..., 0][allowed], atol=1e-5)
    assert_close(np.asarray(end)[allowed], raw[..., 1][allowed], atol=1e-5)
    assert (np.asarray(start)[~allowed] == -1e9).all() and (np.asarray(end)[~allowed] == -1e9).all()
    # Without a mask every position is scored; argmax never lands outside the context with one.
    unmasked_start, _ = head(sequence)
    assert_close(unmasked_start, raw[..., 0], atol=1e-5)
    assert allowed[np.arange(2), np.asarray(start).argmax(-1)].all()

    # float16: the mask value stays finite.
    half = SpanHead(dtype="float16")
    half_start, _ = half(sequence.astype("float16"), context)
    assert np.isfinite(np.asarray(half_start, "float32")).all()
    assert float(np.asarray(half_start, "float32")[0, 0]) == -3e4  # float16 holds 30,000 exactly

    # Config round trip and .keras save/load in a model.
    revived = SpanHead.from_config(head.get_config())
    assert revived.get_config() == head.get_config()
    inputs = keras.Input((6, 16)), keras.Input((6,), dtype="int32")
    model = keras.Model(inputs, head(*inputs))
    path = str(tmp_path / "span.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    for ours, theirs in zip(model.predict([sequence, context], verbose=0), restored.predict([sequence, context], verbose=0)):
        np.testing.assert_array_equal(ours, theirs)


def test_new_head_argument_errors():
    with pytest.raises(ValueError, match="num_classes"):
        ClassificationHead(num_classes=0)
    with pytest.raises(ValueError, match="dropout"):
        ClassificationHead(num_classes=2, dropout=1.0)
    with pytest.raises(ValueError, match="num_classes"):
        TokenClassificationHead(num_classes="3")


def _pooling_reference(mode, x, mask):
    """The poolings written out row by row in numpy (float64): what SentencePooling must give."""
    rows = []
    for tokens, row_mask in zip(x.astype("float64"), mask):
        real = tokens[row_mask == 1]  # (n_real, hidden)
        n = len(real)
        rows.append({
            "mean": real.mean(0),
            "cls": tokens[0],
            "max": real.max(0),
            "mean_sqrt_len": real.sum(0) / math.sqrt(n),
            "weighted_mean": (real * np.arange(1, n + 1)[:, None]).sum(0) / (n * (n + 1) / 2),
            "last_token": real[-1],
        }[mode])
    return np.stack(rows)


@pytest.mark.parametrize("mode", ["mean", "cls", "max", "mean_sqrt_len", "weighted_mean", "last_token"])
def test_sentence_pooling_values(mode):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6, 8)).astype("float32")
    mask = (np.arange(6)[None, :] < np.array([[6], [3], [1]])).astype("int32")  # 6, 3 and 1 real tokens
    x += 100.0 * (1 - mask[:, :, None])  # padding values that would show if they leaked in (max, mean)
    expected = _pooling_reference(mode, x, mask)
    assert_close(SentencePooling(mode)(x, mask), expected, atol=1e-5)
    normalized = SentencePooling(mode, normalize=True)(x, mask)
    assert_close(normalized, expected / np.linalg.norm(expected, axis=-1, keepdims=True), atol=1e-6)
    assert_close(np.linalg.norm(normalized, axis=-1), np.ones(3), atol=1e-6)


def test_sentence_pooling_concatenates_modes_in_order_and_keeps_float32():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype="int32")
    pooled = SentencePooling(["max", "cls", "mean"])(x, mask)
    assert tuple(pooled.shape) == (2, 12)
    expected = np.concatenate([_pooling_reference(m, x, mask) for m in ("max", "cls", "mean")], axis=-1)
    assert_close(pooled, expected, atol=1e-6)
    # With a float32 policy, bfloat16 token vectors (a mixed_bfloat16 encoder) are pooled in float32.
    half = SentencePooling("mean", dtype="float32")(x.astype(keras.backend.standardize_dtype("bfloat16")), mask)
    assert keras.backend.standardize_dtype(half.dtype) == "float32"
    # A row without real tokens gives finite zeros for the means and no inf for max.
    empty = np.zeros((1, 5), dtype="int32")
    for mode in ("mean", "mean_sqrt_len", "weighted_mean", "max", "last_token"):
        assert np.isfinite(np.asarray(SentencePooling(mode, normalize=True)(x[:1], empty))).all(), mode


def test_sentence_pooling_argument_errors_and_config(tmp_path):
    for bad in ("median", "", [], ["mean", "mean"], ["mean", "sum"], 3, None):
        with pytest.raises(ValueError, match=r"argument `mode`, expected one of \['mean', 'cls', 'max'"):
            SentencePooling(bad)
    with pytest.raises(ValueError, match="argument `normalize`, expected a bool. Received: normalize='yes'"):
        SentencePooling("mean", normalize="yes")

    layer = SentencePooling(["cls", "mean"], normalize=True, name="pool")
    config = layer.get_config()
    assert config["mode"] == ["cls", "mean"] and config["normalize"] is True
    revived = SentencePooling.from_config(config)
    assert revived.get_config() == config and revived.modes == ("cls", "mean")
    assert keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer)).get_config() == config

    # Symbolic call and .keras save/load inside a model.
    tokens, mask = keras.Input((None, 8)), keras.Input((None,), dtype="int32")
    output = layer(tokens, mask)
    assert tuple(output.shape) == (None, 16)
    model = keras.Model([tokens, mask], output)
    path = str(tmp_path / "pooling.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    data = [np.random.default_rng(2).normal(size=(2, 4, 8)).astype("float32"), np.array([[1, 1, 0, 0], [1, 1, 1, 1]])]
    np.testing.assert_array_equal(restored.predict(data, verbose=0), model.predict(data, verbose=0))
