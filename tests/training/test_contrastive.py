"""Contrastive fine-tuning of a SentenceEncoder: sentence-transformers' loss and gradients, training, exact resume, errors.

The cross-replica part (2 workers of 16 pairs == 1 replica of 32) is in tests/distribute/test_contrastive.py.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.training import ContrastiveConfig, InBatchNegatives, finetune_sentence_encoder
from bert_keras.training.contrastive import contrastive_model, pair_dataset
from tests import sentence_models

ANCHORS = ["the good day", "a bad day", "not ok", "very good", "naive cafe", "the day is ok", "quick fox", "is not very bad",
           "", "Naïve café — OK!", "日本語 😀 ok", "good good good"]
POSITIVES = ["good day !", "bad , bad", "ok ? not", "good , very", "cafe naive", "ok day", "the fox", "very bad ? not",
             "   ", "cafe !", "ok", "the good"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return sentence_models.write_tiny_bert(str(tmp_path_factory.mktemp("contrastive") / "bert"))


def _encoder(bert, seed=3):
    keras.utils.set_random_seed(seed)
    return SentenceEncoder.from_checkpoint(bert, pooling="mean", max_seq_length=sentence_models.TINY_MAX_LENGTH)


def test_loss_and_gradients_equal_sentence_transformers_multiple_negatives_ranking_loss(bert):
    torch = pytest.importorskip("torch")
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    reference = sentence_models.sentence_transformer(bert, pooling="mean", normalize=False)
    reference.train()
    for module in reference.modules():  # dropout off in both
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    features = [reference.tokenize(ANCHORS), reference.tokenize(POSITIVES)]
    expected = MultipleNegativesRankingLoss(reference, scale=20.0)(features, None)
    expected.backward()
    embeddings = reference[0].auto_model.embeddings.word_embeddings.weight.grad.numpy()

    model = _encoder(bert)
    trainer = contrastive_model(model, scale=20.0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        logits = trainer({"anchor": tf.constant(ANCHORS), "positive": tf.constant(POSITIVES)}, training=False)
        ours = loss(tf.range(len(ANCHORS)), logits)
    word_embeddings = model.encoder.embeddings.word_embeddings.embeddings
    gradient = tf.convert_to_tensor(tape.gradient(ours, word_embeddings.value)).numpy()
    assert logits.shape == (len(ANCHORS), len(POSITIVES))
    expected = float(expected.detach())
    assert abs(float(ours) - expected) <= 1e-5, (float(ours), expected)
    assert np.abs(gradient - embeddings).max() <= 1e-5 * max(1.0, np.abs(embeddings).max())  # float32 sums in another order
    assert np.abs(embeddings).max() > 1e-3  # the gradient compared is not zero


def test_in_batch_negatives_are_the_other_positives():
    anchors = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]], dtype="float32")
    positives = np.array([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype="float32")
    logits = InBatchNegatives(scale=10.0)(anchors, positives).numpy()
    cosines = np.array([[1, 0, -1], [0, 1, 0], [0.5 ** 0.5, 0.5 ** 0.5, -(0.5 ** 0.5)]])
    np.testing.assert_allclose(logits, 10.0 * cosines, atol=1e-5)
    layer = InBatchNegatives.from_config(InBatchNegatives(scale=5.0).get_config())
    assert layer.scale == 5.0
    with pytest.raises(ValueError, match=r"`scale`, expected a positive number. Received: scale=0"):
        InBatchNegatives(scale=0)


def test_pair_batches_are_full_and_each_epoch_depends_on_its_index_alone():
    pairs = [f"a{i}" for i in range(10)], [f"p{i}" for i in range(10)]
    stream = iter(pair_dataset(*pairs, batch_size=4, shuffle_seed=5))
    epochs = [[next(stream) for _ in range(2)] for _ in range(3)]  # 10 // 4 = 2 full batches per epoch
    for epoch in epochs:
        for features, labels in epoch:
            assert labels.numpy().tolist() == [0, 1, 2, 3]
            rows = [(a.decode(), p.decode()) for a, p in zip(features["anchor"].numpy(), features["positive"].numpy())]
            assert all(a[1:] == p[1:] for a, p in rows)  # the pairs stay together
    again = iter(pair_dataset(*pairs, batch_size=4, shuffle_seed=5).skip(4))  # epoch 2 of a resumed run
    assert [next(again)[0]["anchor"].numpy().tolist() for _ in range(2)] == [b[0]["anchor"].numpy().tolist() for b in epochs[2]]
    assert epochs[0][0][0]["anchor"].numpy().tolist() != epochs[1][0][0]["anchor"].numpy().tolist()  # reshuffled


@pytest.mark.slow
def test_training_on_lists_pulls_the_pairs_together(bert):
    model = _encoder(bert)
    before = model.encode(ANCHORS) @ model.encode(POSITIVES).T
    history = finetune_sentence_encoder(model, ANCHORS * 2, np.array(POSITIVES * 2), batch_size=12, epochs=10,
                                        learning_rate=5e-3, verbose=0)
    after = model.encode(ANCHORS) @ model.encode(POSITIVES).T
    assert len(history["loss"]) == 10 and history["loss"][-1] < history["loss"][0] * 0.5, history
    rank = lambda scores: np.mean(np.argmax(scores, axis=1) == np.arange(len(ANCHORS)))  # noqa: E731
    assert rank(before) <= 0.25 and rank(after) >= 8 / 12  # 1 of 12 anchors finds its positive before, 9 after (seeded)
    assert model.encoder.pooler.trainable  # frozen for the run only (no embedding reads it)


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_weights_of_an_uninterrupted_one(bert, tmp_path):
    options = dict(batch_size=4, epochs=3, learning_rate=1e-3, verbose=0)

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise KeyboardInterrupt

    model = _encoder(bert)
    straight = finetune_sentence_encoder(model, ANCHORS, POSITIVES, backup_dir=str(tmp_path / "a"), **options)
    expected = model.get_weights()
    model = _encoder(bert)
    with pytest.raises(KeyboardInterrupt):
        finetune_sentence_encoder(model, ANCHORS, POSITIVES, backup_dir=str(tmp_path / "b"), callbacks=[Interrupt()], **options)
    model = _encoder(bert)
    resumed = finetune_sentence_encoder(model, ANCHORS, POSITIVES, backup_dir=str(tmp_path / "b"), **options)
    assert resumed["loss"] == straight["loss"] and len(resumed["loss"]) == 3
    for ours, theirs in zip(model.get_weights(), expected):
        np.testing.assert_allclose(ours, theirs, atol=1e-6)
    # The backup belongs to this run: other pairs or settings are refused, not resumed from.
    with pytest.raises(ValueError, match=r"was made by a run with other pairs"):
        finetune_sentence_encoder(_encoder(bert), ANCHORS, POSITIVES[::-1], backup_dir=str(tmp_path / "b"), **options)


@pytest.mark.parametrize("anchors, positives, options, message", [
    (ANCHORS, POSITIVES[:-1], {}, r"must be pairs: received 12 anchors and 11 positives"),
    (ANCHORS, POSITIVES, {"batch_size": 16}, r"Received 12 pairs, fewer than one batch of batch_size=16"),
    ("one text", "another", {}, r"argument `anchors`, expected a list of str. Received: str"),
    (ANCHORS[:-1] + [3], POSITIVES, {}, r"argument `anchors`: item 11 is int, not str"),
    (ANCHORS, POSITIVES, {"learning_rat": 1.0}, r"Unknown option\(s\) \['learning_rat'\] of ContrastiveConfig"),
])
def test_bad_pairs_are_clear_errors(bert, anchors, positives, options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        finetune_sentence_encoder(_encoder(bert), anchors, positives, **{"batch_size": 4, **options})


def test_a_config_gives_the_same_run_as_its_fields():
    config = ContrastiveConfig.of(batch_size=8, scale=10.0)
    assert config.record()["scale"] == 10.0 and config.batch_size == 8 and config.learning_rate == 2e-5
