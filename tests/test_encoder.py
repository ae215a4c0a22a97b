import numpy as np
import keras
import pytest
import tensorflow as tf

from bert_keras import BertEncoder, PRESETS, preset_names
from tests.helpers import assert_close, hub_inputs, run_model_test

TINY = dict(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=16)


def _inputs(lengths=(7, 4, 1), seq=8, seed=0):
    return hub_inputs(lengths, seq, TINY["vocab_size"], seed=seed, segment_b_from="half")


def _bert_param_count(vocab, layers, hidden, intermediate, positions=512, types=2):
    embeddings = (vocab + positions + types) * hidden + 2 * hidden
    block = 4 * (hidden * hidden + hidden) + 2 * hidden * intermediate + intermediate + hidden + 4 * hidden
    return embeddings + layers * block + hidden * hidden + hidden


@pytest.mark.slow
@pytest.mark.parametrize(
    "preset, expected",
    [
        ("bert_base_en_uncased", 109_482_240),
        ("bert_large_en_uncased", 335_141_888),
        ("minilm_l6_h384_uncased", 22_713_216),
    ],
)
def test_preset_parameter_counts(preset, expected):
    assert BertEncoder.from_architecture(preset).count_params() == expected


def test_presets_cover_the_published_family():
    names = preset_names()
    small = [n for n in names if n.startswith("small_bert_")]
    assert len(small) == 24
    assert len(names) == 29 + 6  # BERTs, then BERT's family: ALBERT, ELECTRA base and small, DistilBERT, RoBERTa, XLM-R
    config = PRESETS["small_bert_en_uncased_L-4_H-512_A-8"]["config"]
    assert (config["num_layers"], config["hidden_size"], config["num_heads"], config["intermediate_size"]) == (4, 512, 8, 2048)
    assert PRESETS["bert_base_en_cased"]["config"]["vocab_size"] == 28996
    assert PRESETS["bert_base_en_cased"]["do_lower_case"] is False
    small_model = BertEncoder.from_architecture("small_bert_en_uncased_L-2_H-128_A-2")
    assert small_model.count_params() == _bert_param_count(30522, 2, 128, 512)


def test_from_preset_never_gives_random_weights_silently():
    with pytest.raises(ValueError, match=r"architectures without weights.*from_checkpoint\(path\).*from_architecture\('bert_base_en_uncased'\)"):
        BertEncoder.from_preset("bert_base_en_uncased")


def test_unknown_preset_lists_the_names():
    with pytest.raises(ValueError, match=r"Unknown preset 'bert_huge'.*bert_base_en_uncased"):
        BertEncoder.from_architecture("bert_huge")


def test_hub_output_contract():
    encoder = BertEncoder(**TINY)
    inputs = _inputs()
    out = encoder(inputs)
    assert sorted(out) == ["default", "encoder_outputs", "pooled_output", "sequence_output"]
    assert tuple(out["sequence_output"].shape) == (3, 8, 16)
    assert tuple(out["pooled_output"].shape) == (3, 16)
    assert len(out["encoder_outputs"]) == 2
    assert_close(out["encoder_outputs"][-1], out["sequence_output"], atol=0)
    assert_close(out["default"], out["pooled_output"], atol=0)
    first = np.asarray(out["sequence_output"])[:, 0]
    expected = np.tanh(first @ encoder.pooler.kernel.numpy() + encoder.pooler.bias.numpy())
    assert_close(out["pooled_output"], expected, atol=1e-6)


def test_attention_probabilities_output():
    encoder = BertEncoder(**TINY, return_attention_probs=True)
    out = encoder(_inputs())
    probs = [np.asarray(p) for p in out["attention_probs"]]
    assert len(probs) == 2 and probs[0].shape == (3, 2, 8, 8)
    assert probs[1][1, :, :, 4:].max() == 0.0
    np.testing.assert_allclose(probs[0].sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("variant", [{}, {"position_embedding": "sinusoidal", "norm_first": True}])
def test_padding_invariance(variant):
    encoder = BertEncoder(**{**TINY, **variant})
    short = _inputs(seq=8)
    padded = {k: np.pad(v, ((0, 0), (0, 6))) for k, v in short.items()}
    a, b = encoder(short), encoder(padded)
    mask = short["input_mask"].astype(bool)
    assert_close(np.asarray(b["sequence_output"])[:, :8][mask], np.asarray(a["sequence_output"])[mask], atol=1e-5)
    assert_close(b["pooled_output"], a["pooled_output"], atol=1e-5)
    for layer_a, layer_b in zip(a["encoder_outputs"], b["encoder_outputs"]):
        assert_close(np.asarray(layer_b)[:, :8][mask], np.asarray(layer_a)[mask], atol=1e-5)


@pytest.mark.parametrize("variant", [{}, {"position_embedding": "sinusoidal", "norm_first": True}])
def test_pooled_output_alone_equals_the_whole_encoders(variant):
    encoder = BertEncoder(**{**TINY, **variant})
    inputs = {k: np.pad(v, ((0, 0), (0, 3))) for k, v in _inputs(seq=8).items()}  # padding after every row
    expected = encoder(inputs)["pooled_output"]
    assert_close(encoder.pooled_output(inputs), expected, atol=1e-6)
    compiled = tf.function(encoder.pooled_output, jit_compile=True)
    assert_close(compiled(inputs), expected, atol=1e-5)
    with pytest.raises(ValueError, match="input_mask"):
        encoder.pooled_output({"input_word_ids": inputs["input_word_ids"]})


@pytest.mark.parametrize("variant", [{}, {"norm_first": True, "shared_layers": True}, {"pack_tokens": False}])
def test_the_padded_layout_equals_the_packed_encoders_outputs(variant):
    encoder = BertEncoder(**{**TINY, **variant})
    inputs = _inputs(lengths=(7, 4, 1), seq=8)  # rows of three lengths: packing gathers 12 of 24 positions
    expected, padded = encoder(inputs), encoder.padded_outputs(inputs)
    mask = inputs["input_mask"].astype(bool)
    assert_close(np.asarray(padded["sequence_output"])[mask], np.asarray(expected["sequence_output"])[mask], atol=1e-5)
    assert_close(padded["pooled_output"], expected["pooled_output"], atol=1e-5)
    first = encoder.padded_outputs(inputs, first_token_only=True)
    assert tuple(first["sequence_output"].shape) == (3, 1, TINY["hidden_size"])
    assert_close(first["pooled_output"], expected["pooled_output"], atol=1e-5)
    graph = tf.function(encoder.padded_outputs).get_concrete_function(
        {k: tf.TensorSpec([None, None], tf.int32) for k in inputs}).graph
    assert not {op.type for op in graph.get_operations()} & {"Where", "Cumsum", "If", "StatelessIf"}  # no packing


def test_pre_layer_norm_has_final_norm():
    encoder = BertEncoder(**TINY, norm_first=True)
    assert encoder.output_layer_norm is not None
    assert encoder.count_params() == BertEncoder(**TINY).count_params() + 2 * 16
    out = encoder(_inputs())
    seq = np.asarray(out["sequence_output"])
    np.testing.assert_allclose(seq.mean(-1), 0.0, atol=1e-5)


def test_config_round_trip_reproduces_outputs():
    encoder = BertEncoder(**TINY, activation="gelu_approximate", dropout=0.2)
    config = encoder.get_config()
    for key, value in {**TINY, "activation": "gelu_approximate", "dropout": 0.2}.items():
        assert config[key] == value
    revived = BertEncoder.from_config(config)
    revived.set_weights(encoder.get_weights())
    inputs = _inputs()
    assert_close(revived(inputs)["sequence_output"], encoder(inputs)["sequence_output"], atol=0)
    assert revived.get_config() == config


def test_keras_save_and_load_reproduces_outputs(tmp_path):
    encoder = BertEncoder(**TINY, position_embedding="sinusoidal")
    outputs, restored = run_model_test(encoder, _inputs(), tmp_path)
    assert isinstance(restored, BertEncoder)
    assert sorted(outputs) == ["default", "encoder_outputs", "pooled_output", "sequence_output"]


@pytest.mark.slow
def test_one_fit_step_lowers_the_loss():
    encoder = BertEncoder(**TINY)
    inputs = {k: keras.Input(shape=(None,), dtype="int32", name=k) for k in _inputs()}
    logits = keras.layers.Dense(2, name="head")(encoder(inputs)["pooled_output"])
    model = keras.Model(inputs, logits)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    data = _inputs(lengths=(8, 6, 5, 3, 2, 7, 4, 1))
    labels = (data["input_word_ids"][:, 0] % 2).astype("int32")
    before = model.evaluate(data, labels, verbose=0)
    model.fit(data, labels, epochs=1, batch_size=8, verbose=0)
    after = model.evaluate(data, labels, verbose=0)
    assert after < before


@pytest.mark.parametrize("jit_compile", [False, True])
def test_runs_under_tf_function(jit_compile):
    encoder = BertEncoder(**TINY)
    inputs = _inputs()
    eager = encoder(inputs)
    spec = {k: tf.TensorSpec([None, None], tf.int32) for k in inputs}
    fn = tf.function(lambda x: encoder(x), input_signature=[spec], jit_compile=jit_compile)
    graph = fn({k: tf.constant(v) for k, v in inputs.items()})
    assert_close(graph["sequence_output"], eager["sequence_output"], atol=1e-5)
    assert_close(graph["pooled_output"], eager["pooled_output"], atol=1e-5)


def test_training_flag_enables_dropout():
    encoder = BertEncoder(**TINY, dropout=0.3)
    inputs = _inputs()
    inference = np.asarray(encoder(inputs)["pooled_output"])
    assert_close(encoder(inputs, training=False)["pooled_output"], inference, atol=0)
    assert np.max(np.abs(np.asarray(encoder(inputs, training=True)["pooled_output"]) - inference)) > 1e-3


def test_sequence_longer_than_max_sequence_length():
    encoder = BertEncoder(**TINY)
    with pytest.raises(ValueError, match=r"sequence length \(20\) exceeds max_sequence_length \(16\)"):
        encoder(_inputs(lengths=(20,), seq=20))


def test_int64_inputs_are_accepted():
    encoder = BertEncoder(**TINY)
    inputs = _inputs()
    wide = {k: v.astype("int64") for k, v in inputs.items()}
    assert_close(encoder(wide)["pooled_output"], encoder(inputs)["pooled_output"], atol=0)


@pytest.mark.parametrize(
    "change, pattern",
    [
        ({"hidden_size": 30, "num_heads": 4}, r"hidden_size=30, num_heads=4.*divisors of 30"),
        ({"num_layers": 0}, r"`num_layers`.*num_layers=0"),
        ({"activation": "gelu_fast"}, r"activation='gelu_fast'"),
        ({"dropout": 1.5}, r"dropout=1.5"),
        ({"position_embedding": "alibi"}, r"position_embedding='alibi'"),
        ({"initializer_range": 0}, r"initializer_range=0"),
    ],
)
def test_bad_arguments(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        BertEncoder(**{**TINY, **change})


def test_wrong_input_keys():
    encoder = BertEncoder(**TINY)
    inputs = _inputs()
    inputs["segment_ids"] = inputs.pop("input_type_ids")
    with pytest.raises(ValueError, match=r"Missing: \['input_type_ids'\]\. Unexpected: \['segment_ids'\]"):
        encoder(inputs)
    with pytest.raises(ValueError, match="expects a dict"):
        encoder(_inputs()["input_word_ids"])


def test_wrong_input_dtypes():
    encoder = BertEncoder(**TINY)
    inputs = _inputs()
    inputs["input_mask"] = inputs["input_mask"].astype("float32")
    with pytest.raises(ValueError, match=r"`input_mask` must hold integer.*dtype=float32"):
        encoder(inputs)
    strings = dict(_inputs(), input_word_ids=tf.constant([["a", "b"]]))
    with pytest.raises(ValueError, match=r"`input_word_ids`.*dtype=string"):
        encoder(strings)
    with pytest.raises(ValueError, match=r"`input_word_ids` must have shape \(batch, seq\)"):
        encoder(dict(_inputs(), input_word_ids=np.zeros((3,), "int32")))


def test_symbolic_inputs_with_wrong_dtype_are_rejected():
    encoder = BertEncoder(**TINY)
    inputs = {k: keras.Input(shape=(None,), dtype="int32", name=k) for k in _inputs()}
    inputs["input_type_ids"] = keras.Input(shape=(None,), dtype="float32")
    with pytest.raises(ValueError, match="input_type_ids"):
        encoder(inputs)


def test_other_backends_are_refused():
    from bert_keras._backend import check_backend

    check_backend("tensorflow")
    with pytest.raises(ImportError, match=r"TensorFlow backend only.*keras.backend.backend\(\)='jax'.*KERAS_BACKEND=tensorflow"):
        check_backend("jax")


def _tiny_pair(policy):
    """A float32 encoder and one under `policy` with the same weights."""
    reference = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0)
    mixed = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0, dtype=policy)
    inputs = _inputs()
    reference(inputs)
    mixed(inputs)
    mixed.set_weights(reference.get_weights())
    return reference, mixed, inputs


@pytest.mark.parametrize("policy, atol", [("mixed_bfloat16", 0.1), ("mixed_float16", 0.01)])
def test_mixed_precision_is_close_to_float32(policy, atol):
    reference, mixed, inputs = _tiny_pair(policy)
    assert all(w.dtype == "float32" for w in mixed.weights)
    expected = reference(inputs)
    out = mixed(inputs)
    compute = policy.split("_")[1]
    assert keras.backend.standardize_dtype(out["sequence_output"].dtype) == compute
    for key in ("sequence_output", "pooled_output"):
        actual = np.asarray(tf.cast(out[key], "float32"))
        assert np.isfinite(actual).all()
        assert_close(actual, expected[key], atol=atol)
    # Padding stays masked: the float32 bias of -1e9 is added in float32.
    probs = BertEncoder(**TINY, return_attention_probs=True, dtype=policy)(inputs)["attention_probs"]
    assert float(np.asarray(tf.cast(probs[0], "float32"))[1, :, :, 4:].max()) == 0.0


def test_xla_compiled_call_matches_eager():
    encoder = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0)
    inputs = {k: tf.constant(v) for k, v in _inputs().items()}
    eager = encoder(inputs)
    compiled = tf.function(lambda x: encoder(x, training=False), jit_compile=True)(inputs)
    for key in ("sequence_output", "pooled_output"):
        assert_close(compiled[key], eager[key], atol=1e-5)


@pytest.mark.slow
def test_exported_hub_module_equals_the_in_memory_encoder(tmp_path):
    from bert_keras.export import export_encoder
    from bert_keras.hub import load

    encoder = BertEncoder(**TINY)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(45)]) + "\n")
    export_dir = export_encoder(encoder, str(tmp_path / "encoder"), str(vocab), do_lower_case=True)
    module = load(export_dir)
    inputs = {k: tf.constant(v) for k, v in _inputs().items()}
    expected = encoder(inputs, training=False)
    out = module(inputs, training=False)
    for key in ("sequence_output", "pooled_output", "default"):
        assert_close(out[key], expected[key], atol=1e-6)
    for actual, wanted in zip(out["encoder_outputs"], expected["encoder_outputs"]):
        assert_close(actual, wanted, atol=1e-6)


def _twin_encoders(**kwargs):
    packed = BertEncoder(**TINY, **kwargs)
    padded = BertEncoder(**TINY, pack_tokens=False, **kwargs)
    padded.set_weights(packed.get_weights())
    return packed, padded


def test_packed_tokens_equal_the_padded_computation():
    packed, padded = _twin_encoders(return_attention_probs=True)
    assert packed.get_config()["pack_tokens"] is True
    inputs = _inputs(lengths=(7, 4, 1, 0))  # the last row is all padding
    a, b = packed(inputs), padded(inputs)
    real = inputs["input_mask"].astype(bool)
    assert_close(np.asarray(a["pooled_output"])[:3], np.asarray(b["pooled_output"])[:3], atol=1e-6)
    assert np.isfinite(np.asarray(a["pooled_output"])).all()
    for layer_a, layer_b in zip(a["encoder_outputs"], b["encoder_outputs"]):
        assert_close(np.asarray(layer_a)[real], np.asarray(layer_b)[real], atol=1e-6)
    # Padding is zero, except the always-computed first position of the empty row.
    padding = ~real
    padding[3, 0] = False
    assert np.abs(np.asarray(a["sequence_output"])[padding]).max() == 0.0
    # Attention rows of real queries are identical, including the zeros on padded keys.
    for probs_a, probs_b in zip(a["attention_probs"], b["attention_probs"]):
        query_real = np.broadcast_to(real[:, None, :], probs_a.shape[:3])
        assert_close(np.asarray(probs_a)[query_real], np.asarray(probs_b)[query_real], atol=1e-6)


@pytest.mark.slow
def test_packed_training_step_equals_the_padded_one():
    models = []
    for encoder in _twin_encoders(dropout=0.0, attention_dropout=0.0):
        inputs = {k: keras.Input(shape=(None,), dtype="int32", name=k) for k in _inputs()}
        model = keras.Model(inputs, keras.layers.Dense(2, name="head")(encoder(inputs)["pooled_output"]))
        models.append(model)
    models[1].set_weights(models[0].get_weights())
    data = _inputs(lengths=(8, 6, 5, 3, 2, 7, 4, 1))
    labels = (data["input_word_ids"][:, 0] % 2).astype("int32")
    before = np.concatenate([w.ravel() for w in models[0].get_weights()])
    for model in models:
        model.compile(optimizer=keras.optimizers.SGD(0.5),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(data, labels, epochs=2, batch_size=8, verbose=0)
    after_packed = models[0].get_weights()
    after_padded = models[1].get_weights()
    assert np.abs(np.concatenate([w.ravel() for w in after_packed]) - before).max() > 1e-3
    for w_packed, w_padded in zip(after_packed, after_padded):
        assert_close(w_packed, w_padded, atol=1e-5)
