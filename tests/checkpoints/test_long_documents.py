"""Long documents through ModernBERT: local layers attending in bands equal the dense window, and 8,192 tokens pass
through the encoder and `SentenceEncoder` (issue 59)."""

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from bert_keras.layers import RotarySelfAttention
from bert_keras.layers.modernbert_block import BANDED_MIN_LENGTH, QUERY_CHUNK, banded_attention, sliding_window_bias
from bert_keras.models.modernbert import ModernBertEncoder
from tests.checkpoints.test_modernbert import ours, padded_batch, save_modernbert


def _inputs(lengths, hidden, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(lengths), max(lengths), hidden)).astype("float32")
    mask = (np.arange(max(lengths))[None, :] < np.array(lengths)[:, None]).astype("int32")
    return x, mask


@pytest.mark.parametrize("window", [8, 128])
@pytest.mark.parametrize("lengths", [[37, 20, 1], [301, 300, 150]])  # no multiple of the block; padded rows
def test_bands_equal_the_dense_window_on_every_real_token(window, lengths):
    x, mask = _inputs(lengths, 32)
    layer = RotarySelfAttention(4, attention_window=window, banded_min_length=1)
    dense, probs = layer(x, attention_mask=mask, return_attention_scores=True)
    assert tuple(probs.shape) == (3, 4, max(lengths), max(lengths))  # probabilities come from the dense path
    banded = layer(x, attention_mask=mask)
    real = mask.astype(bool)
    assert np.abs(np.asarray(banded) - np.asarray(dense))[real].max() < 1e-5
    # Traced with an unknown length, the layer picks bands or the dense mask in the graph.
    traced = tf.function(lambda x, m: layer(x, attention_mask=m), input_signature=[
        tf.TensorSpec((None, None, 32), tf.float32), tf.TensorSpec((None, None), tf.int32)])
    assert np.abs(np.asarray(traced(x, mask)) - np.asarray(dense))[real].max() < 1e-5


def test_a_global_layer_by_chunks_of_queries_equals_full_attention():
    lengths = [2 * QUERY_CHUNK + 37, 1500]  # chunks from 2 * QUERY_CHUNK tokens on; the last chunk padded
    x, mask = _inputs(lengths, 16)
    layer = RotarySelfAttention(2)
    dense, _ = layer(x, attention_mask=mask, return_attention_scores=True)
    chunked = layer(x, attention_bias=sliding_window_bias(mask))
    real = mask.astype(bool)
    assert np.abs(np.asarray(chunked) - np.asarray(dense))[real].max() < 1e-5
    traced = tf.function(lambda x, b: layer(x, attention_bias=b), input_signature=[
        tf.TensorSpec((None, None, 16), tf.float32), tf.TensorSpec((None, 1, 1, None), tf.float32)])
    assert np.abs(np.asarray(traced(x, sliding_window_bias(mask))) - np.asarray(dense))[real].max() < 1e-5


def test_a_short_sequence_keeps_the_dense_window_and_a_long_one_uses_bands():
    x, mask = _inputs([BANDED_MIN_LENGTH - 1], 16)
    layer = RotarySelfAttention(2, attention_window=8)
    layer(x, attention_mask=mask)
    calls = []
    layer._banded_attention = lambda *args: calls.append(1) or RotarySelfAttention._banded_attention(layer, *args)
    layer(x, attention_mask=mask)
    assert calls == []
    x, mask = _inputs([BANDED_MIN_LENGTH], 16)
    layer(x, attention_mask=mask)
    assert calls == [1]


def test_banded_probabilities_lie_in_the_band_and_sum_to_one():
    q = np.random.default_rng(1).normal(size=(1, 2, 10, 4)).astype("float32")
    mask = np.array([[1] * 7 + [0] * 3])
    context, probs = banded_attention(q, q, q, mask, attention_window=4)  # blocks of 2: 5 blocks, 6 keys each
    probs = np.asarray(probs)
    assert tuple(context.shape) == (1, 2, 10, 4) and probs.shape == (1, 2, 5, 2, 6)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    # Query 0 of block 1 (position 2) sees positions 0..4: keys 0..4 of its neighbourhood (positions 0..5).
    assert (probs[0, 0, 1, 0] > 0).tolist() == [True, True, True, True, True, False]
    # Query 1 of block 2 (position 5) sees 3..6, not 7 (padding): keys 1..4 of positions 2..7.
    assert (probs[0, 0, 2, 1] > 0).tolist() == [False, True, True, True, True, False]


def test_the_encoder_in_bands_matches_transformers_and_its_dense_twin(tmp_path):
    """Windows of 128 tokens, rows of 700 and 1,000 tokens: bands from the first local layer on."""
    save_modernbert(tmp_path, local_attention=128, max_position_embeddings=2048)
    encoder = ModernBertEncoder.from_checkpoint(str(tmp_path))
    ids, mask = padded_batch([700, 1000], seed=3)
    got = np.asarray(ours(encoder, ids, mask)["sequence_output"])
    twin = ModernBertEncoder.from_config(dict(encoder.get_config(), return_attention_probs=True))
    twin.set_weights(encoder.get_weights())
    dense = np.asarray(ours(twin, ids, mask)["sequence_output"])
    model = transformers.ModernBertModel.from_pretrained(str(tmp_path)).eval()
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    real = mask.astype(bool)
    assert np.abs(got - dense)[real].max() < 1e-5
    assert np.abs(got - expected.last_hidden_state.numpy())[real].max() < 1e-4


@pytest.mark.slow
def test_the_encoder_reads_8192_tokens(tmp_path):
    encoder = ModernBertEncoder(vocab_size=50, num_layers=3, hidden_size=8, num_heads=1, intermediate_size=8,
                                max_sequence_length=8192)
    ids = np.random.default_rng(0).integers(1, 50, (1, 8192)).astype("int32")
    outputs = ours(encoder, ids, np.ones_like(ids))
    assert tuple(outputs["sequence_output"].shape) == (1, 8192, 8)
    assert np.isfinite(np.asarray(outputs["sequence_output"])).all()


@pytest.mark.slow
def test_the_sentence_encoder_takes_8192_tokens_and_no_more(tmp_path):
    from bert_keras.tasks.sentence_encoder import SentenceEncoder
    from tests.checkpoints.test_modernbert import save_modernbert_tokenizer

    size, vocab = save_modernbert_tokenizer(tmp_path)
    save_modernbert(tmp_path, vocab_size=size, hidden_size=16, intermediate_size=16, num_attention_heads=2,
                    local_attention=128, max_position_embeddings=8192, pad_token_id=vocab["[PAD]"],
                    cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"])
    model = SentenceEncoder.from_checkpoint(str(tmp_path), pooling="mean", max_seq_length=8192)
    assert model.max_seq_length == 8192
    packed = model.preprocessor(np.array(["word " * 9000]))
    assert int(np.asarray(packed["input_mask"]).sum()) == 8192  # cut at 8,192 pieces, [CLS] and [SEP] included
    assert model.encode("word " * 9000).shape == (16,)
    with pytest.raises(ValueError, match="max_seq_length"):
        SentenceEncoder.from_checkpoint(str(tmp_path), pooling="mean", max_seq_length=8193)
