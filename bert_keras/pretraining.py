"""Pre-training BERT (masked LM + next sentence) from a plain-text corpus, with `model.fit`.

`run_pretraining` reads a corpus in BERT's format (one sentence per line, a
blank line between documents), builds a `BertEncoder` and a `BertPretrainer`
and their optimizer under `tf.distribute.get_strategy().scope()`, trains with
`model.fit` on `tf.data`, checkpoints at the end of every epoch (Keras'
`BackupAndRestore`: a rerun with the same `out_dir` resumes where the last
finished epoch left off, with the same data), and writes TF Hub modules: the
encoder (with its `mlm` sub-object) and the matching preprocessor.
"""

import dataclasses
import logging
import os

import keras
import tensorflow as tf

from bert_keras.encoder import BertEncoder
from bert_keras.presets import get_preset
from bert_keras.tasks import BertPretrainer
from bert_keras.text.pretraining import pretraining_dataset
from bert_keras.text.tokenizer import WordPieceTokenizer

logger = logging.getLogger(__name__)

BACKUP_DIR = "backup"
ENCODER_DIR = "encoder"
PREPROCESS_DIR = "preprocess"
# LayerNorm scales and offsets and all biases are not decayed, as in BERT.
NO_WEIGHT_DECAY = ("bias", "gamma", "beta")


@dataclasses.dataclass
class PretrainingResult:
    """What `run_pretraining` returns.

    Attributes:
        pretrainer: the trained `BertPretrainer` (its encoder is `.encoder`).
        history: the `keras.callbacks.History` of this call's `fit` (only
            the epochs run in this call when a run resumed).
        steps: int. Optimizer steps taken in total, resumed ones included.
        initial_epoch: int. The epoch this call started from (0 unless resumed).
        encoder_dir: str or None. The encoder Hub module (with `mlm`).
        preprocess_dir: str or None. The preprocessing Hub module.
        num_instances: int. Sentence-pair instances per pass over the corpus.
    """

    pretrainer: BertPretrainer
    history: keras.callbacks.History
    steps: int
    initial_epoch: int
    encoder_dir: str | None
    preprocess_dir: str | None
    num_instances: int


class ProgressCallback(keras.callbacks.Callback):
    """Calls `progress(step, total_steps, logs)` every `every` steps and at the end of each epoch.

    Args:
        progress: callable taking `(step, total_steps, logs)`: the optimizer
            step (resumed steps included), the total, and Keras' logs (`loss`,
            `mlm_logits_mlm_accuracy`, ...; at epoch ends also the validation
            metrics).
        total_steps: int.
        every: int. Defaults to `50`.
    """

    def __init__(self, progress, total_steps, every=50):
        super().__init__()
        self.progress = progress
        self.total_steps = total_steps
        self.every = max(1, int(every))

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        if step % self.every == 0:
            self.progress(step, self.total_steps, dict(logs or {}))

    def on_epoch_end(self, epoch, logs=None):
        self.progress(self._step(), self.total_steps, dict(logs or {}))


def _encoder_config(config, preset, vocab_size, seq_length):
    if (config is None) == (preset is None):
        raise ValueError(
            "Pass exactly one of `config` (a dict of BertEncoder arguments) or `preset` (a name "
            f"from bert_keras.preset_names()). Received: config={config!r}, preset={preset!r}"
        )
    if preset is not None:
        config = dict(get_preset(preset)["config"])
    else:
        if not isinstance(config, dict):
            raise ValueError(
                "Received an invalid value for argument `config`, expected a dict of BertEncoder "
                f"arguments. Received: config={config!r}"
            )
        config = dict(config)
    config.setdefault("vocab_size", vocab_size)
    if config["vocab_size"] != vocab_size:
        raise ValueError(
            f"The model's vocab_size ({config['vocab_size']}) differs from the vocabulary's size "
            f"({vocab_size}). Received: config vocab_size={config['vocab_size']}, vocab_file with "
            f"{vocab_size} tokens"
        )
    if config.get("max_sequence_length", 512) < seq_length:
        raise ValueError(
            f"`seq_length` ({seq_length}) exceeds the model's max_sequence_length "
            f"({config['max_sequence_length']}). Received: seq_length={seq_length}"
        )
    return config


def make_optimizer(learning_rate, total_steps, warmup_steps, weight_decay=0.01, clipnorm=1.0):
    """AdamW with linear warm-up and cosine decay to 0, BERT's weight-decay exclusions.

    Args:
        learning_rate: float. Peak learning rate, reached after `warmup_steps`.
        total_steps: int. Steps of the whole run.
        warmup_steps: int. Steps of linear warm-up from 0.
        weight_decay: float. Decoupled weight decay; biases and LayerNorm
            weights are excluded. Defaults to `0.01`.
        clipnorm: float or None. Global gradient-norm clipping. Defaults to `1.0`.
    """
    warmup_steps = min(int(warmup_steps), max(total_steps - 1, 0))
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        decay_steps=max(total_steps - warmup_steps, 1),
        warmup_target=learning_rate,
        warmup_steps=warmup_steps,
    )
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule, weight_decay=weight_decay, epsilon=1e-6, global_clipnorm=clipnorm
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    return optimizer


def _resumed_epoch(backup_dir):
    """The epoch a `BackupAndRestore` backup will resume from (0 without a backup)."""
    import json

    path = os.path.join(backup_dir, "training_metadata.json")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return int(json.load(f).get("epoch", 0))


def run_pretraining(
    corpus,
    out_dir,
    vocab_file,
    do_lower_case=True,
    *,
    config=None,
    preset=None,
    seq_length=128,
    batch_size=32,
    epochs=1,
    steps_per_epoch=None,
    learning_rate=1e-4,
    warmup_steps=None,
    weight_decay=0.01,
    max_predictions_per_seq=20,
    masked_lm_prob=0.15,
    short_seq_prob=0.1,
    whole_word_masking=False,
    dupe_factor=1,
    validation_corpus=None,
    seed=0,
    progress=None,
    progress_every=50,
    callbacks=None,
    verbose=0,
    overwrite=False,
    export=True,
):
    """Pre-trains a BERT encoder with masked LM + next sentence prediction and exports Hub modules.

    Training runs `epochs * steps_per_epoch` optimizer steps; the state
    (weights, optimizer, epoch) is backed up in `out_dir/backup` after every
    epoch. If a run is interrupted, calling `run_pretraining` again with the
    same arguments and `out_dir` resumes from the last finished epoch, feeds
    the batches that would have come next, and ends at the same step count.
    The backup is deleted when training completes. At the end it writes
    `out_dir/encoder` (a Hub encoder with the `mlm` sub-object, via
    `bert_keras.hub.export_encoder`) and `out_dir/preprocess` (via
    `bert_keras.hub.export_preprocessor`, at `seq_length`).

    Args:
        corpus: str or list of str. Text files, one sentence per line, a blank
            line between documents; at least two documents. Lines longer than
            `seq_length - 3` tokens are cut into consecutive parts.
        out_dir: str. Output directory (created).
        vocab_file: str. WordPiece `vocab.txt`; its size is the model's `vocab_size`.
        do_lower_case: bool. Uncased tokenization. Defaults to `True`.
        config: dict of `BertEncoder` arguments (`vocab_size` may be left
            out). Exactly one of `config` and `preset`.
        preset: str. A name from `bert_keras.preset_names()`.
        seq_length: int. Defaults to `128`.
        batch_size: int. Global batch size. Defaults to `32`.
        epochs: int. Defaults to `1`.
        steps_per_epoch: int. Steps between checkpoints. Defaults to one pass
            over the instances (`num_instances // batch_size`).
        learning_rate: float. Peak learning rate. Defaults to `1e-4`.
        warmup_steps: int. Defaults to 10% of all steps.
        weight_decay: float. AdamW weight decay. Defaults to `0.01`.
        max_predictions_per_seq: int. Defaults to `20`.
        masked_lm_prob: float. Defaults to `0.15`.
        short_seq_prob: float. Defaults to `0.1`.
        whole_word_masking: bool. Defaults to `False`.
        dupe_factor: int. Differently cut passes over the corpus. Defaults to `1`.
        validation_corpus: optional str or list of str. Held-out text in the
            same format, evaluated at the end of every epoch (`val_*` logs).
        seed: int. Seeds data, masking and initialisation (through
            `keras.utils.set_random_seed`). Defaults to `0`.
        progress: optional callable `(step, total_steps, logs)`; see
            `ProgressCallback`.
        progress_every: int. Steps between `progress` calls. Defaults to `50`.
        callbacks: optional list of more `keras.callbacks.Callback`.
        verbose: int. Keras' `fit` verbosity (`0` silent, `1` progress bar,
            `2` one line per epoch). Defaults to `0`.
        overwrite: bool. Replace existing modules in `out_dir`. Defaults to `False`.
        export: bool. Write the Hub modules at the end. Defaults to `True`;
            with `False`, `encoder_dir` and `preprocess_dir` are `None`.

    Returns:
        `PretrainingResult`.

    Raises:
        FileExistsError: `out_dir/encoder` or `out_dir/preprocess` exists and
            `overwrite` is False (checked before training).
        ValueError: an empty corpus, a corpus of one document, or bad arguments.

    Example:
    >>> result = run_pretraining("corpus.txt", "out", "vocab.txt",
    ...                          preset="small_bert_en_uncased_L-2_H-128_A-2",
    ...                          seq_length=128, epochs=10, steps_per_epoch=1000)
    >>> result.encoder_dir
    'out/encoder'
    """
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(
                f"Received an invalid value for argument `{name}`, expected a positive integer. "
                f"Received: {name}={value!r}"
            )
    out_dir = os.fspath(out_dir)
    encoder_dir = os.path.join(out_dir, ENCODER_DIR)
    preprocess_dir = os.path.join(out_dir, PREPROCESS_DIR)
    if export and not overwrite:
        for path in (encoder_dir, preprocess_dir):
            if os.path.exists(path):
                raise FileExistsError(f"{path!r} already exists; pass overwrite=True to replace it.")
    vocab_file = os.fspath(vocab_file)
    if not os.path.isfile(vocab_file):
        raise FileNotFoundError(f"vocab_file {vocab_file!r} does not exist.")
    tokenizer = WordPieceTokenizer(vocab_file, lower_case=bool(do_lower_case))
    encoder_config = _encoder_config(config, preset, tokenizer.vocabulary_size(), seq_length)
    keras.utils.set_random_seed(seed)

    # === Data ===
    data_args = dict(
        seq_length=seq_length,
        batch_size=batch_size,
        max_predictions_per_seq=max_predictions_per_seq,
        masked_lm_prob=masked_lm_prob,
        short_seq_prob=short_seq_prob,
        whole_word_masking=whole_word_masking,
    )
    dataset = pretraining_dataset(
        corpus, tokenizer, dupe_factor=dupe_factor, repeat=True, drop_remainder=True, seed=seed, **data_args
    )
    num_instances = dataset.num_instances
    if steps_per_epoch is None:
        steps_per_epoch = max(1, num_instances // batch_size)
    if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
        raise ValueError(
            "Received an invalid value for argument `steps_per_epoch`, expected a positive integer. "
            f"Received: steps_per_epoch={steps_per_epoch!r}"
        )
    total_steps = epochs * steps_per_epoch
    backup_dir = os.path.join(out_dir, BACKUP_DIR)
    initial_epoch = _resumed_epoch(backup_dir)
    if initial_epoch:
        # The batches an uninterrupted run would feed next.
        dataset = dataset.skip(initial_epoch * steps_per_epoch)
        logger.info("Resuming from the backup in %s at epoch %d.", backup_dir, initial_epoch)
    validation_data = None
    if validation_corpus is not None:
        validation_data = pretraining_dataset(validation_corpus, tokenizer, seed=seed + 1, **data_args)

    # === Model and optimizer, under the distribution strategy ===
    with tf.distribute.get_strategy().scope():
        encoder = BertEncoder(**encoder_config)
        pretrainer = BertPretrainer(encoder)
        if warmup_steps is None:
            warmup_steps = total_steps // 10
        pretrainer.compile(optimizer=make_optimizer(learning_rate, total_steps, warmup_steps, weight_decay))
    logger.info(
        "Pre-training %s parameters for %d steps (%d epochs of %d) on %d instances per pass.",
        f"{pretrainer.count_params():,}",
        total_steps,
        epochs,
        steps_per_epoch,
        num_instances,
    )

    # === Training ===
    all_callbacks = [keras.callbacks.BackupAndRestore(backup_dir, save_freq="epoch")]
    if progress is not None:
        all_callbacks.append(ProgressCallback(progress, total_steps, progress_every))
    all_callbacks += list(callbacks or [])
    history = pretrainer.fit(
        dataset,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        validation_data=validation_data,
        callbacks=all_callbacks,
        verbose=verbose,
        shuffle=False,  # the instances are shuffled already (seeded)
    )
    steps = int(pretrainer.optimizer.iterations.numpy())

    # === Hub modules ===
    if export:
        from bert_keras.hub import export_encoder, export_preprocessor

        export_encoder(encoder, encoder_dir, vocab_file, do_lower_case, pretrainer=pretrainer, overwrite=overwrite)
        export_preprocessor(preprocess_dir, vocab_file, do_lower_case, seq_length=seq_length, overwrite=overwrite)
        logger.info("Pre-training done after %d steps; wrote %s and %s.", steps, encoder_dir, preprocess_dir)
    else:
        encoder_dir = preprocess_dir = None
        logger.info("Pre-training done after %d steps.", steps)
    return PretrainingResult(
        pretrainer=pretrainer,
        history=history,
        steps=steps,
        initial_epoch=initial_epoch,
        encoder_dir=encoder_dir,
        preprocess_dir=preprocess_dir,
        num_instances=num_instances,
    )
