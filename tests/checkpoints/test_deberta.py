"""DeBERTa-v3: the log buckets against hand-computed values and transformers' own function, the layers, and
`DebertaV3Encoder` read from a folder transformers 5 saves, against transformers' `DebertaV2Model` (random seeded
weights, a batch whose longest row is past both `position_buckets` and `max_relative_positions`)."""

import json

import numpy as np
import pytest
import torch
import transformers
from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

from bert_keras.checkpoints import load_checkpoint, load_pretrained
from bert_keras.formats import CheckpointError, ConfigError, read_checkpoint
from bert_keras.layers import (
    DebertaBlock,
    DisentangledSelfAttention,
    RelativeEmbeddings,
    RelativePositionBuckets,
    log_bucket_positions,
)
from bert_keras.layers.relative_positions import relative_position_buckets
from bert_keras.models import DebertaV3Encoder
from bert_keras.tasks import END_LOGITS, START_LOGITS, BertClassifier, BertSpanLabeler, BertTokenClassifier
from tests.checkpoints._models import perturb_torch
from tests.text.deberta_tokenizers import write_deberta_tokenizer

# DeBERTa-v3's kind (relative attention with log buckets, shared keys, a LayerNorm-ed relative table, no absolute
# positions, no segments), small: buckets matter from 8 tokens on, the log scale ends at 64.
CONFIG = dict(vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
              relative_attention=True, position_buckets=16, max_relative_positions=64, pos_att_type=["p2c", "c2p"],
              share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
              max_position_embeddings=512, hidden_act="gelu", layer_norm_eps=1e-7, pad_token_id=0)
LENGTHS = (70, 9, 33)  # 70 > max_relative_positions: the farthest buckets are clipped to the table


TOKENIZER_TEXTS = ["the quick brown fox jumps over the lazy dog", "pack my box with five dozen liquor jugs"] * 30


def save_deberta(folder, model_class="DebertaV2Model", seed=0, tokenizer=True, **overrides):
    """A random DeBERTa of transformers' own class (every weight perturbed: LayerNorms are not ones), saved with a
    small DeBERTa-v3 tokenizer (`tokenizer`; its ids are within the vocabulary)."""
    if tokenizer:
        write_deberta_tokenizer(folder, TOKENIZER_TEXTS, size=CONFIG["vocab_size"] - 1)
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(transformers.DebertaV2Config(**dict(CONFIG, **overrides)))
    perturb_torch(model, seed=seed)
    model.save_pretrained(str(folder))
    return model


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("deberta")
    save_deberta(path, tokenizer=False)
    return path


@pytest.fixture(scope="module")
def encoder(folder):
    return DebertaV3Encoder.from_checkpoint(str(folder))


def padded_batch(lengths=LENGTHS, seed=0, type_vocab_size=0):
    """Ids `(batch, max(lengths))` of rows `lengths` long, zero-padded, their 0/1 mask and segment ids."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), max(lengths)), "int32")
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(3, CONFIG["vocab_size"], length)
    mask = (np.arange(ids.shape[1])[None, :] < np.array(lengths)[:, None]).astype("int32")
    types = rng.integers(0, max(type_vocab_size, 1), ids.shape).astype("int32") * mask
    return ids, mask, types


def reference(folder, ids, mask, types):
    model = transformers.DebertaV2Model.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                     token_type_ids=torch.tensor(types, dtype=torch.long), output_hidden_states=True)


def ours(encoder, ids, mask, types):
    return encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})


def max_difference(a, b, mask):
    """The largest difference at real tokens (transformers' padding rows attend uniformly to every position)."""
    return float(np.abs(np.asarray(a) - np.asarray(b))[mask.astype(bool)].max())


# --- the buckets -------------------------------------------------------------------------------------------------


def test_log_buckets_of_the_small_config_by_hand():
    # mid = 8: |d| <= 8 stays; else 8 + ceil(log(|d| / 8) / log(63 / 8) * 7): 9 -> 8 + ceil(0.40) = 9,
    # 20 -> 8 + ceil(3.11) = 12, 63 -> 8 + 7 = 15, 64 -> 8 + ceil(7.05) = 16, 100 -> 8 + ceil(8.57) = 17.
    distances = np.array([0, 1, -7, 8, 9, 20, 63, 64, 100, -100, -9])
    assert np.asarray(log_bucket_positions(distances, 16, 64)).tolist() == [0, 1, -7, 8, 9, 12, 15, 16, 17, -17, -9]


def test_log_buckets_of_deberta_v3_by_hand():
    # position_buckets 256, max_relative_positions 512 (every released DeBERTa-v3): mid = 128, log(511 / 128) = 1.3843;
    # 129 -> 128 + ceil(0.71) = 129, 200 -> 128 + ceil(40.9) = 169, 511 -> 255, 1000 -> 128 + ceil(188.6) = 317.
    distances = np.array([0, 127, 128, 129, 200, 511, 512, 1000, -1000, -129])
    assert np.asarray(log_bucket_positions(distances, 256, 512)).tolist() == [
        0, 127, 128, 129, 169, 255, 256, 317, -317, -129]


@pytest.mark.parametrize("buckets,maximum", [(16, 64), (256, 512), (8, 24)])
def test_log_buckets_equal_transformers_function_on_every_distance(buckets, maximum):
    distances = np.arange(-2100, 2100)
    theirs = make_log_bucket_position(torch.tensor(distances), buckets, maximum).numpy().astype("int64")
    np.testing.assert_array_equal(np.asarray(log_bucket_positions(distances, buckets, maximum)), theirs)


def test_bucket_matrix_is_query_minus_key_and_unbucketed_without_buckets():
    matrix = np.asarray(relative_position_buckets(12, 16, 64))
    assert matrix[11, 0] == 10 and matrix[0, 11] == -10 and matrix[3, 3] == 0  # 11 -> 8 + ceil(1.08) = 10
    assert np.asarray(relative_position_buckets(4, -1, 512)).tolist()[3] == [3, 2, 1, 0]
    assert tuple(RelativePositionBuckets(16, 64)(np.zeros((2, 7), "int32")).shape) == (7, 7)


def test_bucket_layer_refuses_a_log_scale_that_starts_past_its_end():
    with pytest.raises(ValueError, match="max_relative_positions"):
        RelativePositionBuckets(position_buckets=16, max_relative_positions=9)


# --- the layers --------------------------------------------------------------------------------------------------


def test_disentangled_attention_scores_follow_the_formula():
    """One head, no projections' biases: softmax((q.k + q.Kr[b] + k.Qr[b]) / sqrt(d * 3)) by hand in numpy."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 5, 4)).astype("float32")
    table = rng.normal(size=(8, 4)).astype("float32")  # span 4
    buckets = np.asarray(relative_position_buckets(5, 4, 8))  # mid 2: distances 3 and 4 go to the log scale
    layer = DisentangledSelfAttention(num_heads=1)
    _, probs = layer(x, table, buckets, return_attention_scores=True)
    wq, bq = (np.asarray(w) for w in layer.query_dense.weights[:2])
    wk, bk = (np.asarray(w) for w in layer.key_dense.weights[:2])
    q, k = x[0] @ wq + bq, x[0] @ wk + bk
    qr, kr = table @ wq + bq, table @ wk + bk
    rows = np.clip(buckets + 4, 0, 7)
    scores = q @ k.T + np.take_along_axis(q @ kr.T, rows, 1) + np.take_along_axis(k @ qr.T, rows.T, 1).T
    scores = scores / np.sqrt(4 * 3)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(probs)[0, 0], expected / expected.sum(-1, keepdims=True), atol=1e-6)


def test_separate_position_projections_exist_only_without_shared_keys():
    x = np.zeros((1, 3, 8), "float32")
    table, buckets = RelativeEmbeddings(4, 8)(x), RelativePositionBuckets(4, 16)(x)
    shared = DebertaBlock(num_heads=2, intermediate_size=16)
    shared(x, table, buckets)
    separate = DebertaBlock(num_heads=2, intermediate_size=16, position_attention=["c2p"], share_attention_key=False)
    separate(x, table, buckets)
    assert shared.attention.position_key_dense is None and shared.attention.position_query_dense is None
    assert separate.attention.position_key_dense is not None and separate.attention.position_query_dense is None
    assert len(separate.weights) == len(shared.weights) + 2
    assert shared.attention.scale_factor == 3 and separate.attention.scale_factor == 2


def test_attention_refuses_an_unknown_position_term():
    with pytest.raises(ValueError, match="position_attention"):
        DisentangledSelfAttention(num_heads=2, position_attention=["c2p", "p2p"])


def test_relative_table_is_layer_normalized():
    layer = RelativeEmbeddings(span=3, hidden_size=8)
    table = np.asarray(layer(np.zeros((1, 2, 8))))
    assert table.shape == (6, 8)
    np.testing.assert_allclose(table.mean(-1), 0.0, atol=1e-5)
    raw = RelativeEmbeddings(span=3, hidden_size=8, norm="none")
    np.testing.assert_array_equal(np.asarray(raw(np.zeros((1, 2, 8)))), np.asarray(raw.embeddings))


# --- the encoder against transformers ----------------------------------------------------------------------------


def test_sequence_output_and_every_layer_equal_transformers(folder, encoder):
    ids, mask, types = padded_batch()
    theirs = reference(folder, ids, mask, types)
    outputs = ours(encoder, ids, mask, types)
    assert max_difference(outputs["sequence_output"], theirs.last_hidden_state.numpy(), mask) < 1e-5
    assert len(outputs["encoder_outputs"]) == 2
    for layer, hidden in enumerate(outputs["encoder_outputs"]):
        assert max_difference(hidden, theirs.hidden_states[layer + 1].numpy(), mask) < 1e-5
    sequence = np.asarray(outputs["sequence_output"])
    np.testing.assert_array_equal(np.asarray(outputs["pooled_output"]), sequence[:, 0])
    np.testing.assert_array_equal(np.asarray(outputs["default"]), sequence[:, 0])


def test_attention_maps_equal_transformers_attentions(folder, encoder):
    """The maps a user inspects (`return_attention_probs`) are transformers' `attentions` at every real query."""
    twin = DebertaV3Encoder.from_config(dict(encoder.get_config(), return_attention_probs=True))
    twin.set_weights(encoder.get_weights())
    ids, mask, types = padded_batch()
    model = transformers.DebertaV2Model.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                       output_attentions=True).attentions
    probs = ours(twin, ids, mask, types)["attention_probs"]
    rows = np.broadcast_to(mask[:, None, :, None].astype(bool), (3, 4) + ids.shape[1:] * 2)
    for layer in range(2):
        difference = np.abs(np.asarray(probs[layer]) - theirs[layer].numpy())[rows]
        assert difference.max() < 1e-6


@pytest.mark.parametrize("overrides", [
    dict(share_att_key=False),
    dict(pos_att_type=["c2p"], norm_rel_ebd="none"),
    dict(position_biased_input=True, type_vocab_size=2, embedding_size=32, max_position_embeddings=128),
    dict(position_buckets=-1, max_relative_positions=-1, max_position_embeddings=128, pos_att_type="p2c|c2p"),
], ids=["separate-position-projections", "c2p-only-no-norm", "absolute-positions-segments-projection",
        "unbucketed-legacy-string"])
def test_the_options_of_deberta_v2_configs_equal_transformers(tmp_path, overrides):
    save_deberta(tmp_path, **overrides)
    ids, mask, types = padded_batch(type_vocab_size=overrides.get("type_vocab_size", 0))
    outputs = ours(DebertaV3Encoder.from_checkpoint(str(tmp_path)), ids, mask, types)
    theirs = reference(tmp_path, ids, mask, types)
    assert max_difference(outputs["sequence_output"], theirs.last_hidden_state.numpy(), mask) < 1e-5


def test_reader_translates_the_config_and_lists_heads_unused(tmp_path):
    save_deberta(tmp_path, model_class="DebertaV2ForSequenceClassification", num_labels=3)
    weights = read_checkpoint(str(tmp_path))
    assert weights.encoder_kind == "deberta"
    config = weights.encoder_config
    assert (config["position_buckets"], config["max_relative_positions"], config["position_attention"],
            config["share_attention_key"], config["relative_norm"], config["position_biased_input"]) == (
        16, 64, ["c2p", "p2c"], True, "layer_norm", False)
    assert weights.arrays["encoder.relative_embeddings.embeddings"].shape == (32, 64)
    # The ContextPooler is what the model pools with: the encoder's pooler; the classifier only where asked for.
    assert config["pooler_activation"] == "gelu" and weights.heads == []
    assert set(weights.summary.unused) == {"classifier.weight", "classifier.bias"}


def test_load_checkpoint_builds_the_deberta_encoder(folder, encoder):
    loaded = load_checkpoint(str(folder))
    assert isinstance(loaded.encoder, DebertaV3Encoder)
    ids, mask, types = padded_batch()
    np.testing.assert_allclose(np.asarray(ours(loaded.encoder, ids, mask, types)["sequence_output"]),
                               np.asarray(ours(encoder, ids, mask, types)["sequence_output"]), atol=1e-6)


def test_load_pretrained_of_a_folder_without_its_tokenizer_names_what_is_missing(folder):
    """DeBERTa-v3's tokenizer is read from the folder's tokenizer.json (tests/checkpoints/test_deberta_workflows.py):
    a folder of weights alone is told so, as every family's."""
    with pytest.raises(ValueError, match=r"has no spm.model, which its deberta_unigram tokenizer is read from.*"
                                         r"\(or its tokenizer.json\)"):
        load_pretrained(str(folder))
    assert load_checkpoint(str(folder)).tokenizer_kind == "deberta_unigram"


LABELS = {0: "negative", 1: "neutral", 2: "positive"}


def on_ids(task, bare):
    """`bare` (the same task on `task`'s encoder, no preprocessor: fed the Hub dict of ids) with `task`'s head."""
    for name in ("classifier_head", "span_head"):
        if hasattr(task, name):
            getattr(bare, name).set_weights(getattr(task, name).get_weights())
    return bare


def test_sequence_classifier_gives_transformers_probabilities(tmp_path):
    """DebertaV2ForSequenceClassification: the ContextPooler (dense + GELU on the first token) as the encoder's
    pooler, the classifier as BertClassifier's head, the labels from id2label."""
    model = save_deberta(tmp_path, model_class="DebertaV2ForSequenceClassification", num_labels=3, id2label=LABELS,
                         label2id={name: index for index, name in LABELS.items()})
    ids, mask, types = padded_batch()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask)).logits
    read = BertClassifier.from_checkpoint(str(tmp_path), activation="softmax")
    assert isinstance(read.encoder, DebertaV3Encoder) and read.label_names == list(LABELS.values())
    classifier = on_ids(read, BertClassifier(read.encoder, num_classes=3, activation="softmax"))
    probabilities = np.asarray(classifier({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}))
    np.testing.assert_allclose(probabilities, torch.softmax(logits, -1).numpy(), atol=1e-4)


def test_token_classifier_gives_transformers_logits(tmp_path):
    model = save_deberta(tmp_path, model_class="DebertaV2ForTokenClassification", num_labels=5)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask)).logits
    read = BertTokenClassifier.from_checkpoint(str(tmp_path))
    tagger = on_ids(read, BertTokenClassifier(read.encoder, num_classes=5))
    ours_logits = tagger({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    assert max_difference(ours_logits, logits.numpy(), mask) < 1e-4


def test_question_answering_head_gives_transformers_start_and_end_logits(tmp_path):
    model = save_deberta(tmp_path, model_class="DebertaV2ForQuestionAnswering")
    ids, mask, types = padded_batch()
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    # The reader answers in the second segment (and [CLS]): its logits elsewhere are masked. DeBERTa-v3 has no segment
    # table, so the segment ids change nothing else.
    context = (np.arange(ids.shape[1])[None, :] >= 4).astype("int32") * mask
    read = BertSpanLabeler.from_checkpoint(str(tmp_path))
    outputs = on_ids(read, BertSpanLabeler(read.encoder))({"input_word_ids": ids, "input_mask": mask,
                                                               "input_type_ids": context})
    answerable = np.asarray(outputs[START_LOGITS]) > -1e8
    assert answerable.sum() >= context.sum() - len(LENGTHS)  # the context, less each row's final [SEP]
    assert max_difference(outputs[START_LOGITS], theirs.start_logits.numpy(), answerable) < 1e-4
    assert max_difference(outputs[END_LOGITS], theirs.end_logits.numpy(), answerable) < 1e-4


@pytest.mark.parametrize("field,value,wording", [
    ("conv_kernel_size", 3, "convolution"),
    ("relative_attention", False, "relative attention"),
    ("pos_att_type", ["c2p", "p2p"], "pos_att_type"),
    ("norm_rel_ebd", "batch_norm", "norm_rel_ebd"),
])
def test_configs_it_cannot_follow_are_refused_by_field(tmp_path, field, value, wording):
    save_deberta(tmp_path)
    config_file = tmp_path / "config.json"
    config = json.loads(config_file.read_text())
    config[field] = value
    config_file.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=wording) as error:
        read_checkpoint(str(tmp_path))
    assert field in str(error.value)


@pytest.mark.slow
def test_encoder_serves_from_a_saved_model_and_converts_to_litert_builtins(encoder, tmp_path):
    """Every op of the disentangled attention and the log buckets (dynamic batch and length) is a LiteRT builtin."""
    import tensorflow as tf

    interpreter = pytest.importorskip("ai_edge_litert.interpreter")
    from bert_keras.export.litert import op_names

    spec = {key: tf.TensorSpec([None, None], tf.int32, name=key)
            for key in ("input_word_ids", "input_mask", "input_type_ids")}
    module = tf.Module()
    module.encoder = encoder
    module.serve = tf.function(lambda x: {"sequence_output": encoder(x)["sequence_output"]}, input_signature=[spec])
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    loaded = tf.saved_model.load(str(tmp_path))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([loaded.signatures["serving_default"]], loaded)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    data = converter.convert()
    assert not {"VAR_HANDLE", "READ_VARIABLE", "CUSTOM"} & op_names(data)
    runner = interpreter.Interpreter(model_content=data).get_signature_runner()
    for lengths in (LENGTHS, (5, 3)):
        ids, mask, types = padded_batch(lengths)
        inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}
        expected = np.asarray(ours(encoder, ids, mask, types)["sequence_output"])
        assert max_difference(runner(**inputs)["sequence_output"], expected, mask) < 1e-5
        served = loaded.signatures["serving_default"](**inputs)["sequence_output"]
        assert max_difference(served, expected, mask) < 1e-5


# microsoft/deberta-v3-base's config.json, as published (the weights are not installable offline).
DEBERTA_V3_BASE = {
    "model_type": "deberta-v2", "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 512,
    "relative_attention": True, "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True,
    "pos_att_type": "p2c|c2p", "layer_norm_eps": 1e-7, "max_relative_positions": -1, "position_biased_input": False,
    "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 0, "vocab_size": 128100,
}


def test_deberta_v3_base_config_translates_to_the_encoder_arguments():
    from bert_keras.formats.deberta import config_to_kwargs

    kwargs = config_to_kwargs(DEBERTA_V3_BASE, "config.json")
    assert kwargs == dict(
        vocab_size=128100, num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072, activation="gelu",
        max_sequence_length=512, layer_norm_epsilon=1e-7, dropout=0.1, attention_dropout=0.1, initializer_range=0.02,
        position_biased_input=False, type_vocab_size=0, embedding_size=None, position_buckets=256,
        max_relative_positions=512, position_attention=["c2p", "p2c"], share_attention_key=True,
        relative_norm="layer_norm")


def test_a_tensor_missing_or_of_another_shape_is_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    save_deberta(tmp_path)
    weights = load_file(str(tmp_path / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if k != "encoder.rel_embeddings.weight"},
              str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="encoder.rel_embeddings.weight.*is missing"):
        read_checkpoint(str(tmp_path))
    weights["encoder.rel_embeddings.weight"] = weights["encoder.rel_embeddings.weight"][:20]
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"\(20, 64\).*\(32, 64\)"):
        read_checkpoint(str(tmp_path))


def test_mixed_bfloat16_stays_close(encoder):
    ids, mask, types = padded_batch()
    twin = DebertaV3Encoder.from_config(dict(encoder.get_config(), dtype="mixed_bfloat16"))
    twin.set_weights(encoder.get_weights())
    expected = np.asarray(ours(encoder, ids, mask, types)["sequence_output"])
    low = np.asarray(ours(twin, ids, mask, types)["sequence_output"]).astype("float32")
    assert max_difference(low, expected, mask) < 0.05 * np.abs(expected).max()
