"""Contrastive fine-tuning of a sentence encoder: (anchor, positive) pairs, the other positives as negatives.

For a batch of pairs `(a_i, p_i)` the loss is the multiple negatives ranking
loss (sentence-transformers' `MultipleNegativesRankingLoss`): the
cross-entropy of `scale * cos(a_i, p_j)` over every positive `p_j` of the
batch, with `p_i` the right answer. The other positives are the negatives,
so the batch is the loss: under a strategy of N replicas each replica scores
its anchors against the positives of *every* replica (gathered, with their
gradients), and N replicas of b pairs train what one replica of N * b pairs
trains. Scoring only the local positives would silently train another model
(b - 1 negatives per anchor instead of N * b - 1).

`finetune_sentence_encoder` runs it on the one training `Harness`: the
strategy the encoder was built under, AdamW with warmup and linear decay,
per-epoch backups and an exact resume.
"""

import contextlib
import logging
import math

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from bert_keras.optimization import bert_optimizer
from bert_keras.training.backup import fingerprint, held_backup
from bert_keras.training.config import ContrastiveConfig
from bert_keras.training.harness import Harness
from bert_keras.training.record import RunRecord

logger = logging.getLogger(__name__)

ANCHOR, POSITIVE = "anchor", "positive"


@keras.saving.register_keras_serializable(package="bert_keras")
class InBatchNegatives(keras.layers.Layer):
    """Scaled cosine similarities of each anchor with every positive of the global batch.

    Under a `tf.distribute` strategy of several replicas the positives of all
    replicas are gathered (in replica order; the gradient flows back to each
    replica's own), so column `j` is row `j` of the global batch whichever
    replica computes it. With one replica it is the batch's own positives.

    Args:
        scale: float. The inverse temperature of the softmax over the
            positives. Defaults to `20.0` (sentence-transformers' default).
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        anchors: float `(batch, dim)` embeddings.
        positives: float `(batch, dim)` embeddings, row `i` the match of anchor `i`.

    Returns:
        float32 logits `(batch, global_batch)`: row `i` scores anchor `i`
        against each positive of the global batch.
    """

    def __init__(self, scale=20.0, **kwargs):
        kwargs.setdefault("dtype", "float32")  # cosines and the softmax in float32 under mixed precision too
        super().__init__(**kwargs)
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 < scale < math.inf:
            raise ValueError(f"Received an invalid value for argument `scale`, expected a positive number. Received: scale={scale!r}")
        self.scale = float(scale)
        self.built = True

    def call(self, anchors, positives):
        anchors = ops.normalize(ops.cast(anchors, "float32"), axis=-1)  # (batch, dim)
        positives = ops.normalize(ops.cast(positives, "float32"), axis=-1)  # (batch, dim)
        context = tf.distribute.get_replica_context()  # None while Keras builds the model in the strategy's scope
        if context is not None and context.num_replicas_in_sync > 1:
            positives = context.all_gather(positives, axis=0)  # (global_batch, dim), replica 0's rows first
        return self.scale * ops.matmul(anchors, ops.transpose(positives))  # (batch, global_batch)

    def compute_output_spec(self, anchors, positives):
        return keras.KerasTensor((anchors.shape[0], None), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


def contrastive_model(encoder, scale=20.0):
    """The training model: `{"anchor": texts, "positive": texts}` -> `InBatchNegatives` logits.

    Both columns go through the one `encoder` (a `SentenceEncoder` taking raw
    strings): training the returned model trains it. Fit it on
    `(pairs, labels)` whose labels are each row's index in the global batch
    (`pair_dataset` makes them).
    """
    if getattr(encoder, "preprocessor", None) is None:
        raise ValueError("Contrastive fine-tuning needs a SentenceEncoder that takes raw strings (one with a preprocessor).")
    anchors = keras.Input(shape=(), dtype="string", name=ANCHOR)
    positives = keras.Input(shape=(), dtype="string", name=POSITIVE)
    logits = InBatchNegatives(scale, name="in_batch_negatives")(encoder(anchors), encoder(positives))
    return keras.Model({ANCHOR: anchors, POSITIVE: positives}, logits, name="contrastive")


def pair_dataset(anchors, positives, batch_size, shuffle_seed):
    """An endless stream of global batches `({"anchor", "positive"}, labels)`, epoch `k` depending on `k` alone.

    Pass `k` is a stateless shuffle seeded by `(shuffle_seed, k)`, cut into
    `len // batch_size` full batches (a partial batch would change the
    negatives of its rows: it is left out, another part of the data each
    epoch). A row's label is its index in the global batch: the column of
    its positive among the gathered ones.
    """
    columns = {ANCHOR: tf.constant(anchors, tf.string), POSITIVE: tf.constant(positives, tf.string)}
    size = len(anchors)

    def one_pass(index):
        order = tf.random.experimental.stateless_shuffle(tf.range(size), seed=tf.stack([tf.constant(shuffle_seed, tf.int64), index]))
        return tf.data.Dataset.from_tensor_slices(order).batch(batch_size, drop_remainder=True)

    def gather(indices):  # indices: (batch_size,)
        return {key: tf.gather(value, indices) for key, value in columns.items()}, tf.range(batch_size)

    return tf.data.Dataset.counter().flat_map(one_pass).map(gather).prefetch(tf.data.AUTOTUNE)


def _texts(name, values):
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise ValueError(f"Received an invalid value for argument `{name}`, expected a list of str. Received: {type(values).__name__}")
    values = [value.decode() if isinstance(value, bytes) else value for value in values]
    bad = next((i for i, value in enumerate(values) if not isinstance(value, str)), None)
    if bad is not None:
        raise ValueError(f"Received an invalid value for argument `{name}`: item {bad} is {type(values[bad]).__name__}, not str.")
    return values


def finetune_sentence_encoder(model, anchors, positives, config=None, *, backup_dir=None, strategy=None, verbose="auto",
                              callbacks=(), **options):
    """Fine-tunes a `SentenceEncoder` on (anchor, positive) pairs with in-batch negatives.

    Args:
        model: a `SentenceEncoder` taking raw strings, built under the
            strategy's scope (with the dtype policy to train in).
        anchors: list (or 1-D array) of str.
        positives: list of str, `positives[i]` the match of `anchors[i]`
            (a paraphrase, an answer, the title of the passage). Duplicates
            in a batch count as negatives of each other.
        config: optional `ContrastiveConfig`; `options` replace its fields
            (`batch_size`, `epochs`, `learning_rate`, `scale`, ...).
        backup_dir: optional str. Per-epoch snapshots; a rerun of the same
            run (model source, pairs and config, recorded) continues where
            the last one stopped, fed what an uninterrupted run would be.
        strategy: the `tf.distribute.Strategy` the model was built under. Defaults to the model's.
        verbose: `fit` verbosity (0 on workers other than the chief).
        callbacks: Keras callbacks; their state travels in the backup.

    Returns:
        The history dict of every epoch (`loss`), earlier runs' included.

    Raises:
        ValueError: texts that are not str, columns of different lengths,
            fewer pairs than one global batch, a batch size the replicas do
            not divide.
    """
    config = ContrastiveConfig.of(config, **options)
    anchors, positives = _texts("anchors", anchors), _texts("positives", positives)
    if len(anchors) != len(positives):
        raise ValueError(f"`anchors` and `positives` must be pairs: received {len(anchors)} anchors and {len(positives)} positives.")
    steps = len(anchors) // config.batch_size
    if steps == 0:
        raise ValueError(f"Received {len(anchors)} pairs, fewer than one batch of batch_size={config.batch_size}: the "
                         "other pairs of a batch are each pair's negatives, so every batch is full. Lower `batch_size`.")
    strategy = strategy or model.distribute_strategy
    with held_backup(backup_dir, strategy) as own_backup:
        record = None
        if backup_dir is not None:
            run = dict(recipe="contrastive", source=getattr(model, "source", None), **config.record(),
                       pairs=fingerprint(anchors, positives))
            record = RunRecord(backup_dir, run)  # written when training starts
        harness = Harness(strategy, own_backup, config.batch_size if strategy.num_replicas_in_sync > 1 else None, verbose,
                          record=record)
        harness.check_built_here(model)
        with _pooler_frozen(model):
            with strategy.scope():
                trainer = contrastive_model(model, config.scale)
            total = config.epochs * steps
            harness.compile(trainer, lambda: bert_optimizer(config.learning_rate, total, warmup_fraction=config.warmup_fraction,
                                                            weight_decay=config.weight_decay, clipnorm=config.clipnorm),
                            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            logger.info("Contrastive fine-tuning: %d pairs, batch %d (%d negatives per anchor), %d epoch(s), AdamW peak %g",
                        len(anchors), config.batch_size, config.batch_size - 1, config.epochs, config.learning_rate)
            _, history = harness.fit(trainer, pair_dataset(anchors, positives, config.batch_size, config.seed),
                                     epochs=config.epochs, steps_per_epoch=steps, callbacks=callbacks)
    return history


@contextlib.contextmanager
def _pooler_frozen(model):
    """The encoder's pooler (`[CLS]` -> dense -> tanh) out of training: no sentence embedding reads it, so it gets no gradient."""
    pooler = getattr(model.encoder, "pooler", None)
    trainable = pooler is not None and pooler.trainable
    if trainable:
        pooler.trainable = False
    try:
        yield
    finally:
        if trainable:
            pooler.trainable = True
