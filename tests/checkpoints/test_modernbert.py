"""ModernBERT: its layers against their formulas, and `ModernBertEncoder` read from a folder transformers 5 saves,
against transformers' `ModernBertModel` (random seeded weights, a window smaller than the texts)."""

import json

import numpy as np
import pytest
import torch
import transformers

from bert_keras.checkpoints import load_checkpoint
from bert_keras.formats import CheckpointError, ConfigError, read_checkpoint
from bert_keras.layers import (
    GatedFeedForward,
    ModernBertBlock,
    RotaryEmbedding,
    RotarySelfAttention,
    sliding_window_bias,
)
from bert_keras.models.modernbert import ModernBertEncoder, layer_types_every
from tests.checkpoints._models import perturb_torch

# 3 layers (global, local, local), local windows of 8 tokens (4 on either side): windows matter from 6 tokens on.
CONFIG = dict(vocab_size=120, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              global_attn_every_n_layers=3, local_attention=8, max_position_embeddings=512, pad_token_id=0,
              bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)


def save_modernbert(folder, model_class="ModernBertModel", seed=0, **overrides):
    """A random ModernBERT of transformers' own class (every weight perturbed: LayerNorms are not ones), saved."""
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(transformers.ModernBertConfig(**dict(CONFIG, **overrides)))
    perturb_torch(model, seed=seed)
    model.save_pretrained(str(folder))
    return model


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("modernbert")
    save_modernbert(path)
    return path


@pytest.fixture(scope="module")
def encoder(folder):
    return ModernBertEncoder.from_checkpoint(str(folder))


def padded_batch(lengths, seed=0):
    """Ids `(batch, max(lengths))` of rows `lengths` long, zero-padded, and their 0/1 mask."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), max(lengths)), "int32")
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(3, CONFIG["vocab_size"], length)
    return ids, (np.arange(ids.shape[1])[None, :] < np.array(lengths)[:, None]).astype("int32")


def reference(folder, ids, mask, attn_implementation="eager"):
    model = transformers.ModernBertModel.from_pretrained(str(folder), attn_implementation=attn_implementation).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                     output_hidden_states=True)


def ours(encoder, ids, mask):
    return encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)})


# --- the layers --------------------------------------------------------------------------------------------------


def test_rotary_rotates_each_pair_by_position_times_frequency():
    # head_size 4, theta 100: frequencies 100**0 = 1 and 100**-0.5 = 0.1; at position 3 the angles are 3 and 0.3.
    x = np.array([1.0, 2.0, 3.0, 4.0], "float32")
    inputs = np.zeros((1, 1, 4, 4), "float32")
    inputs[0, 0, 3] = x
    rotated = np.asarray(RotaryEmbedding(theta=100.0)(inputs))[0, 0, 3]
    a0, a1 = 3.0, 0.3  # pairs (0, 2) and (1, 3)
    expected = [1 * np.cos(a0) - 3 * np.sin(a0), 2 * np.cos(a1) - 4 * np.sin(a1),
                3 * np.cos(a0) + 1 * np.sin(a0), 4 * np.cos(a1) + 2 * np.sin(a1)]
    np.testing.assert_allclose(rotated, expected, atol=1e-6)


def test_rotary_scores_depend_on_the_distance_only():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 8)).astype("float32")
    layer = RotaryEmbedding(theta=10000.0)
    x = np.stack([np.tile(q, (12, 1)), np.tile(k, (12, 1))])[:, None]  # (2, 1, 12, 8): q and k at every position
    rotated = np.asarray(layer(x))
    scores = rotated[0, 0] @ rotated[1, 0].T  # (12, 12)
    np.testing.assert_allclose(scores[2, 5], scores[7, 10], rtol=1e-5)
    np.testing.assert_allclose(scores[9, 1], scores[10, 2], rtol=1e-5)


def test_rotary_refuses_an_odd_head_size():
    with pytest.raises(ValueError, match="even head size"):
        RotaryEmbedding()(np.zeros((1, 1, 3, 5), "float32"))


def test_geglu_is_the_activation_of_the_input_half_times_the_gate():
    layer = GatedFeedForward(intermediate_size=6, activation="gelu")
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    out = np.asarray(layer(x))
    kernel, output = np.asarray(layer.intermediate_dense.kernel), np.asarray(layer.output_dense.kernel)
    w1, w2 = kernel[:, :6], kernel[:, 6:]
    gelu = lambda v: 0.5 * v * (1 + np.vectorize(__import__("math").erf)(v / np.sqrt(2)))  # exact GELU
    np.testing.assert_allclose(out, (gelu(x @ w1) * (x @ w2)) @ output, atol=1e-5)
    assert layer.intermediate_dense.bias is None and len(layer.weights) == 2


def test_sliding_window_bias_band_and_padding():
    mask = np.array([[1, 1, 1, 1, 1, 1, 0, 0]], "int32")
    allowed = np.asarray(sliding_window_bias(mask, attention_window=4))[0, 0] == 0  # |i - j| <= 2, real keys
    assert allowed[0].tolist() == [True, True, True, False, False, False, False, False]
    assert allowed[4].tolist() == [False, False, True, True, True, True, False, False]
    full = np.asarray(sliding_window_bias(mask))
    assert full.shape == (1, 1, 1, 8) and (full[0, 0, 0] == 0).tolist() == [True] * 6 + [False] * 2


def test_block_config_round_trip_and_first_layer_without_attention_norm():
    block = ModernBertBlock(num_heads=2, intermediate_size=12, attention_window=4, attention_norm=False,
                            rope_theta=160000.0)
    x = np.random.default_rng(1).normal(size=(2, 6, 8)).astype("float32")
    out = np.asarray(block(x, attention_mask=np.ones((2, 6))))
    assert block.attention_layer_norm is None
    # scale of each LayerNorm, no bias anywhere: qkv 8x24, output 8x8, Wi 8x24, Wo 12x8, one LayerNorm scale of 8
    assert sorted(tuple(w.shape) for w in block.weights) == [(8,), (8, 8), (8, 24), (8, 24), (12, 8)]
    clone = ModernBertBlock.from_config(block.get_config())
    clone.build(x.shape)
    clone.set_weights(block.get_weights())
    np.testing.assert_allclose(np.asarray(clone(x, attention_mask=np.ones((2, 6)))), out, atol=1e-6)


def test_attention_refuses_heads_of_odd_size():
    with pytest.raises(ValueError, match="even size"):
        RotarySelfAttention(num_heads=4)(np.zeros((1, 3, 12), "float32"))


def test_layer_types_every():
    assert layer_types_every(7, 3) == ["full_attention", "sliding_attention", "sliding_attention"] * 2 + [
        "full_attention"]


# --- the encoder against transformers ----------------------------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_padded_batch_of_uneven_lengths_matches_transformers(folder, encoder, attn_implementation):
    ids, mask = padded_batch([5, 23, 40, 12])
    expected = reference(folder, ids, mask, attn_implementation)
    got = ours(encoder, ids, mask)
    real = mask.astype(bool)
    assert np.abs(np.asarray(got["sequence_output"]) - expected.last_hidden_state.numpy())[real].max() < 1e-5
    # every block's output is transformers' hidden state of that layer (the last one before the final norm)
    for i, hidden in enumerate(got["encoder_outputs"][:-1]):
        assert np.abs(np.asarray(hidden) - expected.hidden_states[i + 1].numpy())[real].max() < 1e-5
    np.testing.assert_allclose(np.asarray(got["pooled_output"]), np.asarray(got["sequence_output"])[:, 0], atol=0)


def test_a_text_of_every_position_matches_transformers(folder, encoder):
    # 512 tokens (max_position_embeddings): 64 windows of the local layers, RoPE at every position.
    ids, mask = padded_batch([512, 300], seed=1)
    expected = reference(folder, ids, mask)
    got = np.asarray(ours(encoder, ids, mask)["sequence_output"])
    assert np.abs(got - expected.last_hidden_state.numpy())[mask.astype(bool)].max() < 1e-5


def test_the_window_matters(folder, encoder):
    """The same weights with full attention in every layer give other outputs: the test above checks the window."""
    ids, mask = padded_batch([40])
    config = dict(encoder.get_config(), layer_types=["full_attention"] * 3)
    full = ModernBertEncoder.from_config(config)
    full.set_weights(encoder.get_weights())
    assert np.abs(np.asarray(ours(full, ids, mask)["sequence_output"])
                  - np.asarray(ours(encoder, ids, mask)["sequence_output"])).max() > 1e-3


def test_mean_pooling_is_the_mean_over_real_tokens(tmp_path):
    save_modernbert(tmp_path, classifier_pooling="mean")
    encoder = ModernBertEncoder.from_checkpoint(str(tmp_path))
    ids, mask = padded_batch([7, 3])
    got = ours(encoder, ids, mask)
    sequence = np.asarray(got["sequence_output"])
    np.testing.assert_allclose(np.asarray(got["pooled_output"])[1], sequence[1, :3].mean(0), atol=1e-6)
    assert encoder.pooling == "mean"


def test_masked_lm_folder_loads_the_encoder_and_lists_the_head_unused(tmp_path):
    model = save_modernbert(tmp_path, model_class="ModernBertForMaskedLM")
    loaded = load_checkpoint(str(tmp_path), with_heads=False)  # (its head: tests/checkpoints/test_modernbert_heads.py)
    assert isinstance(loaded.encoder, ModernBertEncoder)
    assert {"head.dense.weight", "head.norm.weight", "decoder.bias"} <= set(loaded.summary.unused)
    ids, mask = padded_batch([9, 4])
    with torch.no_grad():
        expected = model.model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    got = np.asarray(ours(loaded.encoder, ids, mask)["sequence_output"])
    assert np.abs(got - expected.last_hidden_state.numpy())[mask.astype(bool)].max() < 1e-5


def test_saves_and_loads_as_a_keras_file(encoder, tmp_path):
    import keras

    path = str(tmp_path / "modernbert.keras")
    encoder.save(path)
    revived = keras.saving.load_model(path)
    ids, mask = padded_batch([10, 6])
    np.testing.assert_allclose(np.asarray(ours(revived, ids, mask)["sequence_output"]),
                               np.asarray(ours(encoder, ids, mask)["sequence_output"]), atol=1e-6)


# --- refusals ----------------------------------------------------------------------------------------------------


def _edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_a_rope_scaling_is_refused(tmp_path):
    save_modernbert(tmp_path)
    _edit_config(tmp_path, rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 1.0, "factor": 2},
                                            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}})
    with pytest.raises(ConfigError, match="rope_parameters.*only 'default'"):
        read_checkpoint(str(tmp_path))


def test_a_config_of_other_sizes_is_refused_naming_the_tensor(tmp_path):
    save_modernbert(tmp_path)
    _edit_config(tmp_path, intermediate_size=80)
    with pytest.raises(CheckpointError, match=r"layers.0.mlp.Wi.weight.*\(160, 64\)"):
        read_checkpoint(str(tmp_path))


# --- the folder's tokenizer and the workflows that read a folder --------------------------------------------------

SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
TEXTS = ["Héllo wörld 😀 driverless cars!", "e\u0301te\u0301 à Zürich, naïve café 🚗🚗", "@VirginAmerica  why?!",
         "I just don't trust my life in google's hands #driverless"]


def save_modernbert_tokenizer(folder):
    """A tokenizer of ModernBERT's kind, trained on tweets: byte-level BPE without a prefix space, NFC, the special
    tokens at the end of the vocabulary, `[CLS] $A [SEP]`; saved by transformers. Returns its size."""
    import tokenizers
    from tokenizers import normalizers, processors

    from tests.test_family_workflows import kept_tokenizer_files

    kept = kept_tokenizer_files("modernbert_bpe")  # trained by the `tokenizers` library on tweets, kept
    trainer = tokenizers.ByteLevelBPETokenizer.from_file(str(kept / "vocab.json"), str(kept / "merges.txt"),
                                                         add_prefix_space=False)
    vocab = trainer.get_vocab()
    vocab.update({token: len(vocab) + i for i, token in enumerate(SPECIALS)})
    merges = [tuple(m) for m in json.loads(trainer._tokenizer.to_str())["model"]["merges"]]
    tokenizer = tokenizers.ByteLevelBPETokenizer(vocab=vocab, merges=merges, add_prefix_space=False)._tokenizer
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.add_special_tokens(SPECIALS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", cls_token="[CLS]",
                                         sep_token="[SEP]", pad_token="[PAD]",
                                         mask_token="[MASK]").save_pretrained(str(folder))
    return len(vocab), vocab


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    """ModernBERT's layout: the embeddings have more rows than the tokenizer has tokens (50,368 for 50,285)."""
    path = tmp_path_factory.mktemp("modernbert_text")
    size, vocab = save_modernbert_tokenizer(path)
    model = save_modernbert(path, vocab_size=size + 11, pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"],
                            sep_token_id=vocab["[SEP]"], bos_token_id=vocab["[CLS]"], eos_token_id=vocab["[SEP]"])
    return path, model


@pytest.mark.slow
def test_load_pretrained_gives_the_encoder_and_ids_of_the_tokenizers_library(text_folder):
    import tokenizers

    from bert_keras.checkpoints import load_pretrained
    from bert_keras.text.modernbert_tokenizer import ModernBertTokenizer

    folder, _ = text_folder
    pretrained = load_pretrained(str(folder), seq_length=40)
    assert isinstance(pretrained.encoder, ModernBertEncoder)
    assert isinstance(pretrained.tokenizer, ModernBertTokenizer) and pretrained.tokenizer.normalization == "NFC"
    packed = pretrained.preprocessor(np.array(TEXTS))
    reference = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    reference.enable_padding(pad_id=reference.token_to_id("[PAD]"), pad_token="[PAD]", length=40)
    expected = reference.encode_batch(TEXTS)
    np.testing.assert_array_equal(np.asarray(packed["input_word_ids"]), [e.ids for e in expected])
    np.testing.assert_array_equal(np.asarray(packed["input_mask"]), [e.attention_mask for e in expected])


@pytest.mark.slow
def test_sentence_encoder_from_checkpoint_embeds_as_transformers(text_folder):
    from bert_keras.tasks.sentence_encoder import SentenceEncoder

    folder, model = text_folder
    encoder = SentenceEncoder.from_checkpoint(str(folder), pooling="mean", max_seq_length=64)
    got = np.asarray(encoder(np.array(TEXTS)))
    reference = transformers.AutoTokenizer.from_pretrained(str(folder))(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**reference).last_hidden_state
    mask = reference["attention_mask"].unsqueeze(-1).float()
    expected = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    assert np.abs(got - expected).max() < 1e-5


@pytest.mark.slow
def test_a_text_of_1500_tokens_with_real_windows_embeds_as_transformers(tmp_path):
    """ModernBERT's own window (128 tokens) and thetas, a text 12 windows long, from raw string to embedding."""
    from bert_keras.tasks.sentence_encoder import SentenceEncoder
    from bert_keras.text.corpora import load_tweets

    size, vocab = save_modernbert_tokenizer(tmp_path)
    model = save_modernbert(tmp_path, vocab_size=size, local_attention=128, max_position_embeddings=2048,
                            pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"])
    text = " ".join(load_tweets()[0][5000:5024])
    reference = transformers.AutoTokenizer.from_pretrained(str(tmp_path))([text], return_tensors="pt")
    length = reference["input_ids"].shape[1]
    assert 1200 < length < 2048
    got = np.asarray(SentenceEncoder.from_checkpoint(str(tmp_path), pooling="mean", max_seq_length=2048)([text]))
    with torch.no_grad():
        expected = model(**reference).last_hidden_state.mean(1).numpy()
    assert np.abs(got - expected).max() < 1e-5


def test_bert_encoder_names_the_class_that_reads_a_modernbert_folder(folder):
    from bert_keras.encoder import BertEncoder

    with pytest.raises(ValueError, match="'modernbert' checkpoint.*ModernBertEncoder.from_checkpoint"):
        BertEncoder.from_checkpoint(str(folder))


@pytest.mark.slow
def test_the_sentence_encoder_exports_as_a_savedmodel_of_raw_strings(text_folder, tmp_path):
    import tensorflow as tf

    from bert_keras.export import export_sentence_encoder
    from bert_keras.tasks.sentence_encoder import SentenceEncoder

    folder, _ = text_folder
    encoder = SentenceEncoder.from_checkpoint(str(folder), pooling="mean", max_seq_length=64)
    export_sentence_encoder(encoder, str(tmp_path / "export"))
    served = tf.saved_model.load(str(tmp_path / "export"))(tf.constant(TEXTS)).numpy()
    assert np.abs(served - np.asarray(encoder(np.array(TEXTS)))).max() < 1e-5


@pytest.mark.slow
def test_the_inspector_shows_local_layers_attending_within_their_window(text_folder):
    from bert_keras.inspection.inspector import Inspector

    folder, _ = text_folder
    result = Inspector.from_checkpoint(str(folder), seq_length=64).inspect(TEXTS[3:])[0]
    layers, heads, n, _ = result.attention.shape
    assert (layers, heads) == (3, 4) and n > 10
    distance = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    assert result.attention[1:, :, distance > 4].max() == 0  # local layers (window 8: 4 on either side)
    assert result.attention[0, :, distance > 4].min() > 0  # the global one sees every token


@pytest.mark.slow
def test_a_classifier_on_the_encoder_trains_from_raw_strings(text_folder):
    """A new head on `pooled_output` (ModernBERT's own classification head is not read yet)."""
    from bert_keras.tasks import BertClassifier

    folder, _ = text_folder
    classifier = BertClassifier.from_checkpoint(str(folder), num_classes=2, activation="softmax", seq_length=32)
    assert isinstance(classifier.encoder, ModernBertEncoder)
    classifier.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    losses = classifier.fit(np.array(TEXTS), np.array([0, 1, 0, 1]), epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_sequence_classifier_answers_as_transformers(tmp_path, pooling):
    """`ModernBertForSequenceClassification`: its `head` read as the encoder's pooler, its `classifier` as ours."""
    from bert_keras.tasks import BertClassifier

    size, vocab = save_modernbert_tokenizer(tmp_path)
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    model = save_modernbert(tmp_path, model_class="ModernBertForSequenceClassification", vocab_size=size,
                            pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"],
                            classifier_pooling=pooling, id2label=labels, label2id={v: k for k, v in labels.items()})
    classifier = BertClassifier.from_checkpoint(str(tmp_path), activation="softmax", seq_length=64)
    assert classifier.encoder.use_pooler and classifier.encoder.pooling == pooling
    assert classifier.label_names == ["negative", "neutral", "positive"]
    got = np.asarray(classifier(np.array(TEXTS)))
    batch = transformers.AutoTokenizer.from_pretrained(str(tmp_path))(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = torch.softmax(model(**batch).logits, -1).numpy()
    assert np.abs(got - expected).max() < 1e-4
