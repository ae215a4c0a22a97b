"""Pre-training BERT (masked LM + next sentence) from a plain-text corpus, with `model.fit`.

`run_pretraining` reads a corpus in BERT's format (one sentence per line, a
blank line between documents), builds a `BertEncoder` and a `BertPretrainer`
and their optimizer under `tf.distribute.get_strategy().scope()`, trains with
`model.fit` on `tf.data` through the run harness (`training.Harness`), which
snapshots the whole state after every epoch (`training.backup`: a rerun with
the same `out_dir` resumes where the last finished epoch left off, with the
same data), and writes TF Hub modules: the encoder (with its `mlm`
sub-object) and the matching preprocessor. What it trains is one
`PretrainConfig`, stored in the backup's run record.

Under a strategy of more than one replica (`training.strategy`) every
worker builds the same instance stream and each replica takes its slice of
every global batch, so N replicas train on what one replica with the same
global batch would; the masked-LM loss is then summed over weights
normalised by the whole global batch's (each replica alone cannot average
over the others' predictions). Only the chief writes the modules; every
worker keeps its own backup.
"""

import dataclasses
import logging
import os

import keras
import tensorflow as tf

from bert_keras._checks import check_positive_int
from bert_keras._faults import fault_point
from bert_keras._files import MARKER, check_target, claim_directory
from bert_keras.encoder import BertEncoder
from bert_keras.export import export_module_pair
from bert_keras.formats.hub_module import ENCODER_DIR, PREPROCESS_DIR
from bert_keras.optimization import bert_optimizer
from bert_keras.presets import get_preset
from bert_keras.tasks.pretrainer import MLM_LOGITS, BertPretrainer, pretraining_losses, pretraining_metrics
from bert_keras.text.pretraining import pretraining_dataset
from bert_keras.text.tokenizer import WordPieceTokenizer
from bert_keras.training.config import PretrainConfig
from bert_keras.training.backup import held_backup, remove_backup
from bert_keras.training.harness import Harness
from bert_keras.training.record import RunRecord

logger = logging.getLogger(__name__)

BACKUP_DIR = "backup"


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


def run_pretraining(corpus, out_dir, vocab_file, config=None, *, encoder_config=None, preset=None, do_lower_case=True,
                    validation_corpus=None, progress=None, progress_every=50, callbacks=None, verbose=0, overwrite=False,
                    export=True, strategy=None, **options):
    """Pre-trains a BERT encoder with masked LM + next sentence prediction and exports Hub modules.

    Training runs `epochs * steps_per_epoch` optimizer steps; the state
    (weights, optimizer, seeds, callbacks' state, epoch) is snapshotted in
    `out_dir/backup` after every epoch. If a run is interrupted, calling `run_pretraining` again with the
    same arguments and `out_dir` resumes from the last finished epoch, feeds
    the batches that would have come next, and ends at the same step count.
    At the end `out_dir` is replaced, in one step, by the module pair
    `out_dir/encoder` (a Hub encoder with the `mlm` sub-object) and
    `out_dir/preprocess` (at `seq_length`), written by
    `bert_keras.hub.export_module_pair`; the backup goes with that step, so
    a run killed at any point before it resumes (or only exports) on rerun.

    Args:
        corpus: str or list of str. Text files, one sentence per line, a blank
            line between documents; at least two documents. Lines longer than
            `seq_length - 3` tokens are cut into consecutive parts.
        out_dir: str. Output directory (created).
        vocab_file: str. WordPiece `vocab.txt`; its size is the model's `vocab_size`.
        config: optional `PretrainConfig`, the recipe's settings; `options`
            replace its fields (`epochs=3`, `seq_length=128`, `batch_size=32`, ...).
        encoder_config: dict of `BertEncoder` arguments (`vocab_size` may be
            left out). Exactly one of `encoder_config` and `preset`.
        preset: str. A name from `bert_keras.preset_names()`.
        do_lower_case: bool. Uncased tokenization. Defaults to `True`.
        validation_corpus: optional str or list of str. Held-out text in the
            same format, evaluated at the end of every epoch (`val_*` logs).
        progress: optional callable `(step, total_steps, logs)`; see
            `ProgressCallback`.
        progress_every: int. Steps between `progress` calls. Defaults to `50`.
        callbacks: optional list of more `keras.callbacks.Callback`.
        verbose: int. Keras' `fit` verbosity (`0` silent, `1` progress bar,
            `2` one line per epoch). Defaults to `0`.
        overwrite: bool. Replace existing modules in `out_dir`. Defaults to `False`.
        export: bool. Write the Hub modules at the end. Defaults to `True`;
            with `False`, `encoder_dir` and `preprocess_dir` are `None`.
        strategy: optional `tf.distribute.Strategy` (see
            `training.strategy.make_strategy`); defaults to the current
            one. `batch_size` is the global batch: a multiple of the
            replicas. On workers other than the chief nothing is exported
            (`encoder_dir` is None) and progress is not reported.

    Returns:
        `PretrainingResult`.

    Raises:
        FileExistsError: `out_dir/encoder` or `out_dir/preprocess` exists and
            `overwrite` is False (checked before training).
        ValueError: an empty corpus, a corpus of one document, or bad arguments.

    Example (hours of training on a real corpus, so not run by the tests):
    >>> result = run_pretraining("corpus.txt", "out", "vocab.txt",  # doctest: +SKIP
    ...                          preset="small_bert_en_uncased_L-2_H-128_A-2",
    ...                          seq_length=128, epochs=10, steps_per_epoch=1000)
    >>> result.encoder_dir  # doctest: +SKIP
    'out/encoder'
    """
    config = _pretrain_config(config, options)
    out_dir, vocab_file = _checked_paths(out_dir, vocab_file, export=export, overwrite=overwrite)
    tokenizer = WordPieceTokenizer(vocab_file, lower_case=bool(do_lower_case))
    encoder_config = _encoder_config(encoder_config, preset, tokenizer.vocabulary_size(), config.seq_length)
    keras.utils.set_random_seed(config.seed)
    harness = Harness(strategy, None, config.batch_size, verbose)
    dataset = pretraining_dataset(corpus, tokenizer, dupe_factor=config.dupe_factor, repeat=True, drop_remainder=True,
                                  seed=config.seed, **config.data_args())
    steps_per_epoch = config.steps_per_epoch or max(1, dataset.num_instances // config.batch_size)
    check_positive_int("steps_per_epoch", steps_per_epoch)
    corpora = [os.path.abspath(c) for c in ([corpus] if isinstance(corpus, str) else corpus)]
    # What a backup resumes: a rerun with anything else is refused (`RunRecord`).
    run = dict(dataclasses.asdict(config), corpus=corpora, vocab_file=os.path.abspath(vocab_file),
               do_lower_case=bool(do_lower_case), encoder=encoder_config, steps_per_epoch=steps_per_epoch)
    claim_directory(out_dir, kind="pretraining_run", accept=("module_pair",), argument="out_dir")
    backup_dir = os.path.join(out_dir, BACKUP_DIR)
    with held_backup(backup_dir, harness.strategy) as own_backup:
        harness.record = RunRecord(backup_dir, run)  # written when training starts
        harness.backup_dir = own_backup
        validation = _validation_data(validation_corpus, tokenizer, config, harness.replicas)
        reporting = []
        if progress is not None and harness.chief:  # the other workers report nothing
            reporting.append(ProgressCallback(progress, config.epochs * steps_per_epoch, progress_every))
        pretrainer, history = _train(harness, config, encoder_config, dataset, steps_per_epoch=steps_per_epoch,
                                     validation=validation, callbacks=reporting + list(callbacks or []))
        steps = int(pretrainer.optimizer.iterations.numpy())
        if harness.chief and export:
            encoder_dir, preprocess_dir = _export(out_dir, pretrainer, vocab_file=vocab_file, do_lower_case=do_lower_case,
                                                  seq_length=config.seq_length, steps=steps, corpora=corpora)
        else:
            encoder_dir = preprocess_dir = None
            remove_backup(backup_dir if harness.chief else own_backup)
            logger.info("Pre-training done after %d steps%s.", steps, "" if harness.chief else "; the chief writes the modules")
    return PretrainingResult(pretrainer=pretrainer, history=history, steps=steps, initial_epoch=harness.resumed_epoch,
                             encoder_dir=encoder_dir, preprocess_dir=preprocess_dir, num_instances=dataset.num_instances)


def _pretrain_config(config, options):
    """The run's `PretrainConfig`: `config` (or the defaults) with `options` replaced, checked."""
    if isinstance(config, dict):
        raise ValueError(
            "Received an invalid value for argument `config`, expected a PretrainConfig (the recipe's settings); "
            f"pass the BertEncoder arguments as `encoder_config=`. Received: config={config!r}"
        )
    config = PretrainConfig.of(config, **options)
    check_positive_int("epochs", config.epochs)
    check_positive_int("batch_size", config.batch_size)
    return config


def _checked_paths(out_dir, vocab_file, *, export, overwrite):
    """`(out_dir, vocab_file)` as str, once the modules may be written in `out_dir` and `vocab_file` exists."""
    out_dir, vocab_file = os.fspath(out_dir), os.fspath(vocab_file)
    if export and not overwrite:
        for path in (os.path.join(out_dir, ENCODER_DIR), os.path.join(out_dir, PREPROCESS_DIR)):
            if os.path.exists(path):
                raise FileExistsError(f"{path!r} already exists; pass overwrite=True to replace it.")
    check_target(out_dir, overwrite=True, argument="out_dir")  # never a directory bert_keras did not write
    if not os.path.isfile(vocab_file):
        raise FileNotFoundError(f"vocab_file {vocab_file!r} does not exist.")
    return out_dir, vocab_file


def _encoder_config(encoder_config, preset, vocab_size, seq_length):
    """The `BertEncoder` arguments: `encoder_config`'s or `preset`'s, checked against the vocabulary and `seq_length`."""
    if (encoder_config is None) == (preset is None):
        raise ValueError(
            "Pass exactly one of `encoder_config` (a dict of BertEncoder arguments) or `preset` (a name from "
            f"bert_keras.preset_names()). Received: encoder_config={encoder_config!r}, preset={preset!r}"
        )
    if preset is not None:
        encoder_config = dict(get_preset(preset)["config"])
    else:
        if not isinstance(encoder_config, dict):
            raise ValueError(
                "Received an invalid value for argument `encoder_config`, expected a dict of BertEncoder "
                f"arguments. Received: encoder_config={encoder_config!r}"
            )
        encoder_config = dict(encoder_config)
    encoder_config.setdefault("vocab_size", vocab_size)
    if encoder_config["vocab_size"] != vocab_size:
        raise ValueError(
            f"The model's vocab_size ({encoder_config['vocab_size']}) differs from the vocabulary's size "
            f"({vocab_size}). Received: encoder_config vocab_size={encoder_config['vocab_size']}, vocab_file with "
            f"{vocab_size} tokens"
        )
    if encoder_config.get("max_sequence_length", 512) < seq_length:
        raise ValueError(
            f"`seq_length` ({seq_length}) exceeds the model's max_sequence_length "
            f"({encoder_config['max_sequence_length']}). Received: seq_length={seq_length}"
        )
    return encoder_config


def _globally_normalised(dataset):
    """Masked-LM weights divided by their sum over the global batch (summed, not averaged, per replica)."""

    def normalise(features, labels, weights):
        mlm = weights[MLM_LOGITS]
        return features, labels, dict(weights, **{MLM_LOGITS: mlm / tf.maximum(tf.reduce_sum(mlm), 1.0)})

    return dataset.map(normalise)


def _validation_data(validation_corpus, tokenizer, config, replicas):
    """`(dataset, steps)` of the held-out corpus (steps None: one pass), or None without one."""
    if validation_corpus is None:
        return None
    validation = pretraining_dataset(validation_corpus, tokenizer, seed=config.seed + 1, drop_remainder=replicas > 1,
                                     **config.data_args())
    if replicas == 1:
        return validation, None
    steps = validation.num_instances // config.batch_size
    if not steps:
        raise ValueError(f"The validation corpus has {validation.num_instances} instances, fewer than one "
                         f"global batch ({config.batch_size}), which a distributed run needs.")
    return _globally_normalised(validation), steps


def _train(harness, config, encoder_config, dataset, *, steps_per_epoch, validation, callbacks):
    """Builds and compiles the pretrainer under the harness, and trains it; `(pretrainer, history)`."""
    num_instances = dataset.num_instances
    if harness.replicas > 1:
        dataset = _globally_normalised(dataset)
    with harness.building(config.dtype):
        pretrainer = BertPretrainer(BertEncoder(**encoder_config))
    total_steps = config.epochs * steps_per_epoch
    warmup_steps = total_steps // 10 if config.warmup_steps is None else config.warmup_steps
    # Under several replicas each replica sums its masked-LM loss over weights normalised by the global batch's.
    losses = (dict(loss=pretraining_losses(mlm_reduction="sum"), weighted_metrics=pretraining_metrics())
              if harness.replicas > 1 else {})
    harness.compile(pretrainer, lambda: bert_optimizer(config.learning_rate, total_steps, warmup_steps=warmup_steps,
                                                       decay="cosine", weight_decay=config.weight_decay), **losses)
    logger.info("Pre-training %s parameters for %d steps (%d epochs of %d) on %d instances per pass.",
                f"{pretrainer.count_params():,}", total_steps, config.epochs, steps_per_epoch, num_instances)
    validation_data, validation_steps = validation or (None, None)
    history, _ = harness.fit(pretrainer, dataset, epochs=config.epochs, steps_per_epoch=steps_per_epoch,
                             validation_data=validation_data, validation_steps=validation_steps, callbacks=callbacks)
    return pretrainer, history


def _export(out_dir, pretrainer, *, vocab_file, do_lower_case, seq_length, steps, corpora):
    """Replaces `out_dir` (the run's backup with it) by the module pair; `(encoder_dir, preprocess_dir)`."""
    _check_only_the_runs(out_dir)
    fault_point("before-export")
    export_module_pair(out_dir, pretrainer.encoder, vocab_file, do_lower_case, seq_length=seq_length,
                       pretrainer=pretrainer, overwrite=True, info={"steps": steps, "corpus": corpora})
    encoder_dir, preprocess_dir = os.path.join(out_dir, ENCODER_DIR), os.path.join(out_dir, PREPROCESS_DIR)
    logger.info("Pre-training done after %d steps; wrote %s and %s.", steps, encoder_dir, preprocess_dir)
    return encoder_dir, preprocess_dir


def _check_only_the_runs(out_dir):
    """Refuses to replace `out_dir` by the modules while it holds entries the run did not write (a user's, added since)."""
    added = sorted(set(os.listdir(out_dir)) - {MARKER, BACKUP_DIR, ENCODER_DIR, PREPROCESS_DIR})
    if added:
        raise FileExistsError(
            f"{out_dir!r} (out_dir) holds entries this run did not write ({added[:5]}); the modules replace the whole "
            "directory, so they are not written. Move those entries out and rerun: training resumes from its backup."
        )
