"""TF Hub modules in the format of TF Model Garden's `export_tfhub_lib.py`: encoder, preprocessor, the pair.

The pair's reader (`read_module_pair`) lives here too: it reads the marker
that `export_module_pair` writes.
"""

import json
import logging
import os
import shutil

import tensorflow as tf

from bert_keras._contract import ARCHITECTURE_FILE
from bert_keras._faults import fault_point
from bert_keras._files import directory_under, staged_directory
from bert_keras._platform.keras_private import traced_as_saved
from bert_keras.dtypes import check_compute_dtype, compute_dtype
from bert_keras.encoder import INPUT_KEYS
from bert_keras.formats.hub_module import (ENCODER_DIR, PREPROCESS_DIR, TOKENIZER_CONFIG_FILE,  # noqa: F401
                                          TOKENIZER_FOLDER, read_module_pair)  # read_module_pair: bert_keras.export's
from bert_keras.text import BertPreprocessor
from bert_keras.text.kinds import kind_of_assets, tokenizer_class

logger = logging.getLogger(__name__)


def _encoder_input_spec():
    return {key: tf.TensorSpec([None, None], tf.int32, name=key) for key in INPUT_KEYS}


class _CallableModule(tf.train.Checkpoint):
    """A reusable SavedModel object: `__call__(inputs, training=False)` runs a Keras model.

    Carries `variables`, `trainable_variables` and `regularization_losses` as
    TF Hub's reusable SavedModel API asks.
    """

    def __init__(self, model, output_fn):
        super().__init__()
        # The model is reached through a closure, not an attribute: as an attribute its Keras
        # variables would be saved a second time next to `variables` (twice the size on disk).
        self._run = lambda inputs, training: output_fn(model, inputs, training)
        self.variables = [getattr(v, "value", v) for v in model.weights]
        self.trainable_variables = [getattr(v, "value", v) for v in model.trainable_weights]
        self.regularization_losses = []
        # Random-seed state of dropout layers: read by the training=True function, not a weight.
        weight_ids = {id(v) for v in model.weights}
        self._keras_state = [getattr(v, "value", v) for v in model.variables if id(v) not in weight_ids]

    @tf.function
    def __call__(self, inputs, training=False):
        return self._run(inputs, training)


def _float32(x):
    # The module's outputs are float32 whatever it computes in (the signatures do not change).
    return tf.cast(x, tf.float32) if x.dtype != tf.float32 else x


def _encoder_outputs(encoder, inputs, training):
    outputs = encoder(inputs, training=training)
    return {
        "sequence_output": _float32(outputs["sequence_output"]),
        "pooled_output": _float32(outputs["pooled_output"]),
        "encoder_outputs": [_float32(x) for x in outputs["encoder_outputs"]],
        "default": _float32(outputs["pooled_output"]),
    }


def _mlm_outputs(pretrainer, inputs, training):
    outputs = pretrainer(inputs, training=training)
    encoder_outputs = _encoder_outputs(pretrainer.encoder, {k: inputs[k] for k in INPUT_KEYS}, training)
    encoder_outputs["mlm_logits"] = _float32(outputs["mlm_logits"])
    return encoder_outputs


def _trace(module, spec):
    # As the save traces them, so that it reuses these traces (see `keras_private.traced_as_saved`).
    with traced_as_saved():
        for training in (False, True):
            module.__call__.get_concrete_function(spec, training=training)


def tokenizer_assets(vocab_file):
    """The module attributes of the tokenizer's files -> their paths, each checked to exist.

    `vocab_file` is a WordPiece `vocab.txt` (the attribute `vocab_file`, as TF
    Hub's BERT modules), or a dict of them: ALBERT's `{"sp_model_file":
    spiece.model}` (as TF Hub's ALBERT modules), RoBERTa's `{"vocab_file":
    vocab.json, "merges_file": merges.txt}` (`bert_keras.text.folders.tokenizer_assets`).
    """
    assets = dict(vocab_file) if isinstance(vocab_file, dict) else {"vocab_file": os.fspath(vocab_file)}
    for name, path in assets.items():
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name} {path!r} does not exist.")
    return assets


def build_encoder_module(encoder, vocab_file, do_lower_case, pretrainer=None):
    """Returns the `tf.Module` that `export_encoder` saves (see there)."""
    assets = tokenizer_assets(vocab_file)
    root = _CallableModule(encoder, _encoder_outputs)
    _trace(root, _encoder_input_spec())
    for name, path in assets.items():
        setattr(root, name, tf.saved_model.Asset(path))
    root.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False, name="do_lower_case")
    if pretrainer is not None:
        if pretrainer.encoder is not encoder:
            raise ValueError("`pretrainer.encoder` must be the encoder being exported.")
        mlm = _CallableModule(pretrainer, _mlm_outputs)
        spec = dict(_encoder_input_spec(), masked_lm_positions=tf.TensorSpec([None, None], tf.int32, name="masked_lm_positions"))
        _trace(mlm, spec)
        root.mlm = mlm
    return root


def export_encoder(encoder, export_dir, vocab_file, do_lower_case, pretrainer=None, overwrite=False, dtype="float32"):
    """Writes `encoder` as a TF Hub encoder SavedModel (Model Garden's format).

    The module is called as `obj(inputs, training=False)` with the dict of
    int32 `(batch, seq)` tensors `input_word_ids`, `input_mask`,
    `input_type_ids`, and returns `pooled_output`, `sequence_output`,
    `encoder_outputs` and `default`. It carries `variables`,
    `trainable_variables`, `regularization_losses`, the `vocab_file` asset and
    the `do_lower_case` variable. With `pretrainer` (a model with an MLM head
    on this encoder), an `mlm` sub-object also takes `masked_lm_positions`
    `(batch, num_predictions)` and adds `mlm_logits`.

    Args:
        encoder: a `BertEncoder` (or any model with the same inputs/outputs).
        export_dir: str. The directory to write; written to a temporary
            sibling first and moved into place.
        vocab_file: str. The WordPiece vocabulary, stored as an asset; or a
            dict of the family tokenizer's files (see `tokenizer_assets`).
        do_lower_case: bool. How the vocabulary expects text to be cased.
        pretrainer: optional model with `encoder` and an `mlm_logits` output.
        overwrite: bool. Replace an existing `export_dir`. Defaults to `False`.
        dtype: str. What the module computes in: `"float32"`, or
            `"bfloat16"` (see `bert_keras.dtypes.compute_dtype`; needs a CPU
            with bfloat16 arithmetic, see `check_compute_dtype` there). Its
            inputs, outputs (float32), variables (float32) and signatures are
            the same either way. Defaults to `"float32"`.
    """
    check_compute_dtype(dtype)
    with staged_directory(export_dir, overwrite, kind="encoder") as staging:
        _save_encoder(staging, encoder, vocab_file, do_lower_case, pretrainer, dtype)
    logger.info("Wrote the encoder module to %s", export_dir)
    return export_dir


def _save_encoder(directory, encoder, vocab_file, do_lower_case, pretrainer, dtype="float32"):
    with compute_dtype(pretrainer if pretrainer is not None else encoder, dtype):
        root = build_encoder_module(encoder, vocab_file, do_lower_case, pretrainer)
        tf.saved_model.save(root, directory, signatures=_encoder_signatures(root))
    _record_architecture(directory, encoder)


def _record_architecture(directory, encoder):
    if not all(hasattr(encoder, name) for name in ("num_heads", "activation", "layer_norm_epsilon")):
        return  # not a BertEncoder: the reader finds the architecture by trying
    config = encoder.get_config()
    os.makedirs(os.path.join(directory, os.path.dirname(ARCHITECTURE_FILE)), exist_ok=True)
    with open(os.path.join(directory, ARCHITECTURE_FILE), "w", encoding="utf-8") as f:
        # position_offset: the one family option the module's shapes do not show (RoBERTa's positions start at 2)
        json.dump({key: config[key] for key in ("num_heads", "activation", "layer_norm_epsilon", "position_offset")
                   if key in config}, f)


def _record_tokenizer(directory, vocab_file, tokenizer):
    """Writes the tokenizer beside an encoder module (`TOKENIZER_FOLDER`, in `assets.extra/`: TensorFlow never reads
    it): its files, under the names `bert_keras.text` reads them by, and `tokenizer_config.json` with the options the
    preprocess module applies (`do_lower_case`, `keep_accents`, `add_prefix_space`: the kind's `options`), which no
    variable of the module holds. `bert_keras.formats.read_hub_module` rebuilds the tokenizer from this folder."""
    assets = tokenizer_assets(vocab_file)
    kind = kind_of_assets(assets)
    if kind is None:
        return  # files of no known tokenizer: the reader finds them by the module's assets, or refuses
    files = tokenizer_class(kind).files
    folder = os.path.join(directory, TOKENIZER_FOLDER)
    os.makedirs(folder)
    for attribute, path in assets.items():
        if attribute in files:
            # "xb": a new file, never one found there (nor through a link planted under its name)
            with open(path, "rb") as source, open(os.path.join(folder, files[attribute]), "xb") as copy:
                shutil.copyfileobj(source, copy)
    options = tokenizer.tokenizer_config() if tokenizer is not None else {}
    with open(os.path.join(folder, TOKENIZER_CONFIG_FILE), "x", encoding="utf-8") as f:
        json.dump(options, f)


def _encoder_signatures(root):
    # Signatures take flat outputs: encoder_outputs becomes encoder_outputs_0, _1, ...
    @tf.function(input_signature=[_encoder_input_spec()])
    def serve(inputs):
        outputs = root(inputs, training=False)
        flat = {key: value for key, value in outputs.items() if key != "encoder_outputs"}
        for i, layer_output in enumerate(outputs["encoder_outputs"]):
            flat[f"encoder_outputs_{i}"] = layer_output
        return flat

    return {"serving_default": serve}


class _TokenizeModule(tf.train.Checkpoint):
    """`preprocess.tokenize`: strings `(batch,)` -> int32 ragged `(batch, words, word_pieces)`."""

    def __init__(self, preprocessor):
        super().__init__()
        self._preprocessor = preprocessor
        special = {key: int(value) for key, value in preprocessor.get_special_tokens_dict().items()}
        self.get_special_tokens_dict = tf.train.Checkpoint()
        self.get_special_tokens_dict.__call__ = tf.function(
            lambda: {key: tf.constant(value, tf.int32) for key, value in special.items()},
            input_signature=[],
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, sentences):
        return self._preprocessor.tokenize(sentences)


class _PackModule(tf.train.Checkpoint):
    """`preprocess.bert_pack_inputs(segments, seq_length=...)`, traced for 1-2 segments of ragged rank 1-2."""

    def __init__(self, preprocessor):
        super().__init__()
        self._preprocessor = preprocessor
        default_seq_length = int(preprocessor.seq_length)

        @tf.function(autograph=False)
        def call(inputs, seq_length=default_seq_length):
            return preprocessor.bert_pack_inputs(list(inputs), seq_length=seq_length)

        self.__call__ = call
        # The save reuses these traces: it asks for each again with the arguments it recorded, the spec of
        # `seq_length` named so (unnamed here, each packing was traced a second time: 1.5 s of a tiny export).
        with traced_as_saved():
            for ragged_rank in (1, 2):
                for num_segments in (1, 2):
                    segments = [tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32) for _ in range(num_segments)]
                    call.get_concrete_function(segments, seq_length=tf.TensorSpec([], tf.int32, name="seq_length"))


class _PreprocessModule(tf.train.Checkpoint):
    def __init__(self, preprocessor, assets, do_lower_case):
        super().__init__()
        self._preprocessor = preprocessor
        self.tokenize = _TokenizeModule(preprocessor)
        self.bert_pack_inputs = _PackModule(preprocessor)
        for name, path in assets.items():
            setattr(self, name, tf.saved_model.Asset(path))
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False, name="do_lower_case")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, sentences):
        return self._preprocessor(sentences)


def export_preprocessor(export_dir, vocab_file, do_lower_case, seq_length=128, overwrite=False, tokenizer=None):
    """Writes a TF Hub preprocessing SavedModel (Model Garden's format).

    The module maps `(batch,)` strings to the encoder's input dict at
    `seq_length`; `.tokenize` maps strings to int32 ragged
    `(batch, words, word_pieces)`; `.tokenize.get_special_tokens_dict()`
    returns `vocab_size`, `start_of_sequence_id`, `end_of_segment_id`,
    `padding_id` and `mask_id`; `.bert_pack_inputs(segments, seq_length=...)`
    packs a list of 1 or 2 ragged tensors (ragged rank 1 or 2). The vocabulary
    travels as the `vocab_file` asset, with `do_lower_case`. Loading it needs
    `import tensorflow_text` first (`bert_keras.hub.load` does that).

    Args:
        export_dir: str. Directory to write; written to a temporary sibling
            first and moved into place.
        vocab_file: str. The WordPiece `vocab.txt`; or, with `tokenizer`, the
            dict of its files (see `tokenizer_assets`), carried as assets.
        do_lower_case: bool. Uncased (`True`) or cased (`False`) tokenization.
        seq_length: int. The default sequence length. Defaults to `128`.
        overwrite: bool. Replace an existing `export_dir`. Defaults to `False`.
        tokenizer: optional tokenizer of the family (`SentencePieceTokenizer`,
            `BytePairTokenizer`) the module tokenizes with, packing as it says
            (RoBERTa's `<s> A </s></s> B </s>`). Defaults to WordPiece on `vocab_file`.
    """
    with staged_directory(export_dir, overwrite, kind="preprocess") as staging:
        _save_preprocessor(staging, vocab_file, do_lower_case, seq_length, tokenizer)
    logger.info("Wrote the preprocessing module to %s", export_dir)
    return export_dir


def _preprocessor(vocab_file, do_lower_case, seq_length, tokenizer):
    if tokenizer is not None:
        return BertPreprocessor(tokenizer=tokenizer, seq_length=seq_length)
    return BertPreprocessor(vocab_file, lower_case=bool(do_lower_case), seq_length=seq_length)


def _save_preprocessor(directory, vocab_file, do_lower_case, seq_length, tokenizer=None):
    assets = tokenizer_assets(vocab_file)
    preprocessor = _preprocessor(vocab_file, do_lower_case, seq_length, tokenizer)
    root = _PreprocessModule(preprocessor, assets, do_lower_case)
    with traced_as_saved():  # the save reuses this trace
        serving_default = root.__call__.get_concrete_function()
    tf.saved_model.save(root, directory, signatures={"serving_default": serving_default})




def export_module_pair(
    out_dir, encoder, vocab_file, do_lower_case, seq_length=128, pretrainer=None, overwrite=False, info=None, progress=None,
    dtype="float32", tokenizer=None,
):
    """Writes `out_dir/encoder` and `out_dir/preprocess` as one output, in one atomic step.

    The pair is staged as one directory and moved into place at once (see
    `bert_keras._files.staged_directory`), so a reader finds both modules or
    neither, and `read_module_pair` tells a whole pair from anything else.
    Beside the encoder module, in `assets.extra/tokenizer/`, go the
    tokenizer's files and a `tokenizer_config.json` with the options the
    preprocess module applies (`do_lower_case`; SentencePiece's
    `keep_accents`; BPE's `add_prefix_space`), from which
    `bert_keras.checkpoints.load_checkpoint` rebuilds the same tokenizer.

    Args:
        out_dir: str. The pair's directory.
        encoder: the `BertEncoder` to export (see `export_encoder`).
        vocab_file: str. The WordPiece vocabulary of both modules; or, with
            `tokenizer`, the dict of its files (see `tokenizer_assets`).
        do_lower_case: bool.
        seq_length: int. The preprocess module's default length; at most the
            encoder's `max_sequence_length`. Defaults to `128`.
        pretrainer: optional model with an MLM head on `encoder` (the `mlm` sub-object).
        overwrite: bool. Replace an earlier output of this package. Defaults to `False`.
        info: optional dict recorded in the pair's marker (e.g. the source checkpoint).
        progress: optional callable `progress(text)` told before each module is written.
        dtype: str. What the encoder module computes in, `"float32"` or
            `"bfloat16"` (see `export_encoder`). Defaults to `"float32"`.
        tokenizer: optional family tokenizer of the preprocess module (see
            `export_preprocessor`). Defaults to WordPiece on `vocab_file`.

    Returns:
        `(encoder_dir, preprocess_dir)`.
    """
    max_length = getattr(encoder, "max_sequence_length", None)
    if max_length is not None and seq_length > max_length:
        raise ValueError(
            f"Received an invalid value for argument `seq_length`, expected at most the encoder's "
            f"max_sequence_length={max_length}. Received: seq_length={seq_length}"
        )
    check_compute_dtype(dtype)
    tokenizer_assets(vocab_file)  # a missing file or a bad vocabulary fails here, before any writing
    preprocessor = _preprocessor(vocab_file, do_lower_case, seq_length, tokenizer)
    report = progress or (lambda text: None)
    info = dict(info or {}, seq_length=int(seq_length), do_lower_case=bool(do_lower_case), dtype=dtype)
    with staged_directory(out_dir, overwrite, kind="module_pair", info=info, argument="out_dir") as staging:
        report("write the encoder module" + (" (with the mlm sub-object)" if pretrainer is not None else "")
               + (f", computing in {dtype}" if dtype != "float32" else ""))
        # Each module's folder is made now, never one found there (`directory_under`: a link planted is refused).
        encoder_dir = directory_under(staging, ENCODER_DIR, argument="out_dir")
        _save_encoder(encoder_dir, encoder, vocab_file, do_lower_case, pretrainer, dtype)
        _record_tokenizer(encoder_dir, vocab_file, preprocessor.tokenizer)
        fault_point("between-modules")
        report(f"write the preprocess module (seq_length={seq_length}, do_lower_case={bool(do_lower_case)})")
        _save_preprocessor(directory_under(staging, PREPROCESS_DIR, argument="out_dir"), vocab_file, do_lower_case,
                           seq_length, tokenizer)
    logger.info("Wrote the module pair to %s", out_dir)
    return os.path.join(out_dir, ENCODER_DIR), os.path.join(out_dir, PREPROCESS_DIR)
