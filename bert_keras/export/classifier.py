"""The classifier export: a SavedModel that serves raw strings, and its loader.

`export_classifier` traces the model's own serving computation (a
`BertClassifier`'s `serving_outputs`); it does not re-implement the forward
pass. `load_classifier` reads what it writes, and `model.export()` directories
of classifiers built with this package.
"""

import json
import logging
import os

import keras
import numpy as np
import tensorflow as tf

from bert_keras._checks import check_int
from bert_keras._files import directory_under, staged_directory
from bert_keras._keras_compat import variables_once, write_archive
from bert_keras.dtypes import check_compute_dtype, compute_dtype
from bert_keras.export import warmup
from bert_keras.hub.loader import load

logger = logging.getLogger(__name__)

LABELS_FILE = "labels.json"


def outputs_probabilities(model):
    """Whether a classifier's output is probabilities (a softmax) rather than logits.

    The activation of the model's last layer tells: a `BertClassifier` with
    `activation="softmax"` ends in a softmax `Activation` layer, and so does
    e.g. `Dense(3, activation="softmax")`.

    >>> text = keras.Input(shape=(4,))
    >>> outputs_probabilities(keras.Model(text, keras.layers.Dense(3, activation="softmax")(text)))
    True
    >>> outputs_probabilities(keras.Model(text, keras.layers.Dense(3)(text)))
    False
    """
    activation = getattr(model.layers[-1], "activation", None) if model.layers else None
    return activation is keras.activations.softmax or getattr(activation, "__name__", None) == "softmax"


# The batch-1 fast path: a single text's packed inputs are padded to the next of these lengths and run
# through an XLA-compiled encoder and head (one compilation per length, on first use). Steps of 8:
# for MiniLM each 8 tokens cost ~1 ms of a ~6 ms call, so finer steps waste less on padding.
# Beyond the last one, or for batches, the graph runs op by op on the batch's longest row, where
# the encoder's token packing (dense layers on real tokens only) pays more than XLA's fusion.
XLA_LENGTHS = (8, 16, 24, 32, 40, 48, 56, 64)


def _serves_its_own_outputs(model):
    """Whether `model` offers its serving computation (`serving_outputs`, as `BertClassifier`) and takes strings."""
    return callable(getattr(model, "serving_outputs", None)) and getattr(model, "preprocessor", None) is not None


def _on_native_encoder(model, dtype):
    """`model`, or its copy on the equal `BertEncoder` (`model.with_native_encoder()`, as `BertClassifier` has).

    In bfloat16 the copy is needed (a SavedModel's graph cannot compute in
    another dtype): a model without `with_native_encoder` is refused. In
    float32 it is taken where it can be made, since the equal `BertEncoder`
    serves a single text faster than a Hub module's graph (under XLA, and
    with its last block computed for the first token only); a module that
    cannot be rebuilt keeps its own graph.
    """
    rebuild = getattr(model, "with_native_encoder", None)
    if dtype != "float32":
        if rebuild is None:
            raise ValueError(
                f"Received a model of type {type(model).__name__}; only a BertClassifier can be exported in "
                f"{dtype}. Build it with BertClassifier(...) or BertClassifier.from_checkpoint(...)."
            )
        return rebuild()
    if rebuild is None or not _serves_its_own_outputs(model):
        return model
    try:
        return rebuild()
    except (ValueError, OSError) as error:  # e.g. a module written elsewhere, or no longer on disk
        logger.info("Serving the encoder module's own graph (it cannot be rebuilt as a BertEncoder: %s)", error)
        return model


def _trim_padding(packed):
    """The Hub input dict cut after the batch's longest row (padding columns carry no information)."""
    length = tf.reduce_max(tf.reduce_sum(packed["input_mask"], axis=1))  # the longest row's tokens
    length = tf.maximum(length, 1)
    return {key: value[:, :length] for key, value in packed.items()}  # (batch, length)


def _pad_to(packed, length):
    """The Hub input dict padded with zeros (padding id 0, mask 0, type 0) to `length` columns."""
    extra = length - tf.shape(packed["input_mask"])[1]
    return {key: tf.pad(value, [[0, 0], [0, extra]]) for key, value in packed.items()}  # (batch, length)


def _bucket(length):
    """The first of `XLA_LENGTHS` that holds `length` tokens (a scalar tensor)."""
    buckets = tf.constant(XLA_LENGTHS, tf.int32)
    return tf.gather(buckets, tf.reduce_sum(tf.cast(buckets < length, tf.int32)))


def _serving_function(model, xla=True):
    """`serve(*texts)` -> the model's outputs, fast where the model offers `serving_outputs` and a preprocessor.

    The fast path packs the texts with the model's preprocessor, cuts the
    padding after the longest row, and runs the model's own
    `serving_outputs` on the packed dict: a single text of at most
    `XLA_LENGTHS[-1]` tokens (with `xla`) XLA-compiled, padded to its length
    bucket, with the last block for the first token only; every other batch
    op by op with the whole encoder (token packing). The outputs equal the
    model's own up to float rounding: padding is masked out of attention,
    so its width changes nothing. Any other model is called as it is.
    """
    if not _serves_its_own_outputs(model):
        return lambda *texts: model(list(texts) if len(texts) > 1 else texts[0], training=False)

    def packed_inputs(texts):
        return _trim_padding(model.preprocessor(list(texts) if len(texts) > 1 else texts[0]))

    def classify(packed):
        return model.serving_outputs(packed, first_token_only=False)  # (batch, num_classes)

    def classify_small(packed):
        return model.serving_outputs(packed, first_token_only=True)  # (batch, num_classes)

    if not xla:
        return lambda *texts: classify(packed_inputs(texts))
    compiled = tf.function(classify_small, jit_compile=True, reduce_retracing=True)

    def serve(*texts):
        packed = packed_inputs(texts)
        shape = tf.shape(packed["input_mask"])  # (batch, length)
        small = tf.logical_and(tf.equal(shape[0], 1), shape[1] <= XLA_LENGTHS[-1])
        return tf.cond(
            small,
            lambda: compiled(_pad_to(packed, _bucket(shape[1]))),
            lambda: classify(packed),
        )

    return serve


def export_classifier(model, export_dir, label_names=None, overwrite=False, extra_assets=None, dtype="float32"):
    """Exports a text classifier as a SavedModel that serves raw strings.

    The `serve` endpoint (also the `serving_default` signature) takes a
    `(batch,)` string tensor `text` (and `text_pair` for two-input models)
    and returns `probabilities` `(batch, num_classes)` and `label` (the name
    of the most probable class). `label_names()` returns the class names.
    The loaded object itself is callable as Keras 2's `model.save(dir)`
    SavedModels were: `tf.saved_model.load(dir)(tf.constant(texts))` gives
    the model's own outputs (its logits, or probabilities for a softmax
    model), float32 `(batch, num_classes)`. This is the call that saves the
    TF Hub workflow's model (Hub layers, a Dense head) for serving.
    A model that outputs logits (see `outputs_probabilities`) gets a softmax
    in the export.

    A `BertClassifier` with a preprocessor is served through its own
    `serving_outputs`, for latency: the padding after a batch's longest text
    is cut, and (in float32) a single text of up to 64 tokens runs
    XLA-compiled (compiled once per length bucket, 8 to 64 tokens in steps
    of 8, on its first request, ~0.5-2 s each for MiniLM) with the last
    block computed for `[CLS]` only (`BertEncoder.pooled_output`). A
    classifier on Hub modules written by bert_keras is exported on the equal
    `BertEncoder` (`BertClassifier.with_native_encoder`); another module
    keeps its own graph. The outputs equal the model's up to float rounding.

    Args:
        model: a `keras.Model` from strings to class logits or probabilities.
        export_dir: str. Written to a temporary sibling and moved into place.
        label_names: list of str, in the order of the model's outputs.
            Defaults to the model's own `label_names` (a `BertClassifier`
            built or fine-tuned with them); required when it has none.
        overwrite: bool. Replace an existing `export_dir`. Defaults to `False`.
        extra_assets: optional dict of file name -> JSON-serialisable value
            (or `bytes`, written as they are, e.g. a PNG), written to
            `assets.extra/` (e.g. training metrics and plots).
        dtype: str. What the export computes in: `"float32"`, or
            `"bfloat16"` for a `BertClassifier` (Keras' `mixed_bfloat16`:
            float32 weights, bfloat16 matrix products; the same inputs,
            float32 outputs and signatures). A Hub encoder layer is first
            rebuilt as the equal `BertEncoder` (`with_native_encoder`).
            `"bfloat16"` on a CPU without bfloat16 arithmetic raises a
            `ValueError` (see `bert_keras.dtypes.check_compute_dtype`).
            Defaults to `"float32"`.
    """
    export_dir = os.fspath(export_dir)
    check_compute_dtype(dtype)
    if label_names is None:
        label_names = getattr(model, "label_names", None)
        if label_names is None:
            raise ValueError("Received no `label_names`, and the model carries none: pass the class names in the "
                             "order of its outputs, e.g. export_classifier(model, export_dir, ['negative', 'positive']).")
    label_names = [str(name) for name in label_names]
    num_outputs = model.outputs[0].shape[-1]
    if num_outputs != len(label_names):
        raise ValueError(
            f"The model has {num_outputs} outputs but {len(label_names)} label names were given: {label_names}."
        )
    model = _on_native_encoder(model, dtype)
    with compute_dtype(model, dtype):
        _write_export(model, export_dir, label_names, overwrite, extra_assets, dtype)
    logger.info("Exported the classifier to %s", export_dir)
    return export_dir


def _write_export(model, export_dir, label_names, overwrite, extra_assets, dtype):
    names = tf.constant(label_names)
    input_names = ["text", "text_pair"][: len(model.inputs)]

    archive = keras.export.ExportArchive()
    archive.track(model)
    variables_once(archive)  # each weight saved once (Keras lists it twice)

    softmax = not outputs_probabilities(model)
    signature = [tf.TensorSpec([None], tf.string, name=name) for name in input_names]
    # XLA's CPU matrix products in bfloat16 are slower than oneDNN's (measured: benchmarks/results/serving.md).
    # One function that both endpoints call: the model's graph is traced once for the two.
    run = tf.function(_serving_function(model, xla=dtype == "float32"), input_signature=signature, autograph=False)

    def serve(*texts):
        outputs = run(*texts)
        probabilities = tf.cast(outputs, tf.float32)  # (batch, num_classes), float32 whatever the compute dtype
        if softmax:
            probabilities = tf.nn.softmax(probabilities, axis=-1)
        return {"probabilities": probabilities, "label": tf.gather(names, tf.argmax(probabilities, axis=-1))}

    archive.add_endpoint("serve", serve, input_signature=signature)

    def call(*texts):  # what `model(texts)` returns: logits or probabilities, as Keras 2's SavedModels did
        return tf.cast(run(*texts), tf.float32)  # (batch, num_classes)

    archive.add_endpoint("__call__", call, input_signature=signature)
    archive.add_endpoint("label_names", lambda: names, input_signature=[])

    with staged_directory(export_dir, overwrite, kind="classifier") as staging:
        write_archive(archive, staging)  # each endpoint traced once
        directory_under(staging, "assets.extra", argument="export_dir")  # made now: a planted link is refused
        with open(os.path.join(staging, "assets.extra", LABELS_FILE), "w") as f:
            json.dump({"label_names": label_names, "inputs": input_names, "dtype": dtype}, f)
        if _serves_its_own_outputs(model):  # its preprocessor tells how long a text is
            requests = warmup.warmup_requests(model.preprocessor, input_names, XLA_LENGTHS)
            warmup.write_warmup_requests(os.path.join(staging, "assets.extra", warmup.WARMUP_FILE), requests)
        for name, value in (extra_assets or {}).items():
            asset = os.path.join(staging, "assets.extra", name)
            if isinstance(value, bytes):
                with open(asset, "wb") as f:
                    f.write(value)
            else:
                with open(asset, "w") as f:
                    json.dump(value, f, indent=2)


class TextClassifier:
    """A loaded text classifier: raw strings in; per text the label and every class's score out.

    Reads a directory written by `export_classifier` (label names included)
    or by Keras' `model.export()` of a classifier built with this package
    (one or two string inputs of shape `(batch,)`, one `(batch, num_classes)`
    output of probabilities or logits). Such an export carries no label
    names: pass `label_names=`, or the classes are numbered `"0"`, `"1"`, ...
    (`label_source` then reads `"numbered"`, and a warning says so).
    Anything else is refused with a `ValueError` that says what was found.

    Args:
        export_dir: str. The SavedModel directory.
        label_names: optional list of str, in the order of the outputs.
            Overrides the names stored in the export.
        warm_up: bool. Replay the export's TF Serving warm-up requests
            (`assets.extra/tf_serving_warmup_requests`, which
            `export_classifier` writes: one text per length bucket, one
            batch) before returning, so that no request after the load
            waits for a compile; `warm_up_seconds` says what it took. Pass
            `False` to load in less time when only a few texts will be
            classified. Defaults to `True`.

    Example (`classifier` is a `BertClassifier`):

    ```python
    export_classifier(classifier, "clf", ["neg", "pos"])
    loaded = load_classifier("clf")
    loaded.predict("what a great day")
    # {'label': 'pos', 'score': 0.93, 'scores': {'neg': 0.07, 'pos': 0.93}}
    loaded.predict(["great", "awful"], top_k=1)   # a list of dicts
    loaded.predict_proba(["great", "awful"])      # a (2, 2) array
    ```
    """

    def __init__(self, export_dir, label_names=None, warm_up=True):
        self.export_dir = os.fspath(export_dir)
        if self.export_dir.endswith(".keras") and os.path.isfile(self.export_dir):
            raise ValueError(
                f"{self.export_dir!r} is a Keras model file, not an export. Load it with "
                "`keras.saving.load_model(path)` and call its `predict_labels(texts)` (a BertClassifier), or export "
                "it once with `bert_keras.export.export_classifier(model, DIR, label_names)` and load DIR."
            )
        self._saved = load(self.export_dir)
        self._signature = self._serving_signature()
        self.inputs = self._input_names()
        self._output = self._output_name()
        self.num_classes = int(self._signature.structured_outputs[self._output].shape[-1])
        self.label_names, self.label_source = self._read_label_names(label_names)
        # TF Serving's warm-up requests, replayed as TF Serving does at load: each length's compile is done here.
        self.warm_up_seconds = warmup.replay(self.export_dir, self._signature) if warm_up else 0.0

    def _refuse(self, found):
        return ValueError(
            f"{self.export_dir!r} is not a text classifier written by bert_keras' `export_classifier` or by "
            f"`model.export()` of a classifier built with it: {found}. Expected a `serving_default` signature "
            "taking one or two string tensors of shape (batch,) and returning (batch, num_classes) scores."
        )

    def _serving_signature(self):
        signatures = getattr(self._saved, "signatures", None) or {}
        if "serving_default" not in signatures:
            raise self._refuse(f"it has no `serving_default` signature (signatures: {sorted(signatures)})")
        return signatures["serving_default"]

    def _input_names(self):
        _, specs = self._signature.structured_input_signature
        if not 1 <= len(specs) <= 2 or any(s.dtype != tf.string or s.shape.rank != 1 for s in specs.values()):
            found = {name: f"{spec.dtype.name} {spec.shape}" for name, spec in specs.items()}
            raise self._refuse(f"its inputs are {found}")
        serve = getattr(self._saved, "serve", None)
        positional = []
        if serve is not None and getattr(serve, "concrete_functions", None):
            args, _ = serve.concrete_functions[0].structured_input_signature
            positional = [spec.name for spec in tf.nest.flatten(args) if getattr(spec, "name", None) in specs]
        # The positional order of `serve` (text, then its pair); `text`/`text_pair` as export_classifier names them.
        if sorted(positional) == sorted(specs):
            return positional
        return sorted(specs, key=lambda name: (name != "text", name))

    def _output_name(self):
        outputs = self._signature.structured_outputs
        if "probabilities" in outputs:
            return "probabilities"
        scores = [name for name, spec in outputs.items() if spec.dtype.is_floating and spec.shape.rank == 2]
        if len(scores) != 1 or (scores and (outputs[scores[0]].shape[-1] or 0) < 2):
            found = {name: f"{spec.dtype.name} {spec.shape}" for name, spec in outputs.items()}
            raise self._refuse(f"its outputs are {found}")
        return scores[0]

    def _read_label_names(self, given):
        if given is not None:
            names, source = [str(name) for name in given], "given"
        else:
            names, source = self._stored_label_names(), "export"
        if names is not None and len(names) != self.num_classes:
            if source == "given":
                raise ValueError(
                    f"Received {len(names)} label names for a classifier with {self.num_classes} classes. "
                    f"Received: label_names={names}"
                )
            logger.warning("%s: the stored label names %s do not match the %d outputs; ignoring them.",
                           self.export_dir, names, self.num_classes)
            names = None
        if names is None:
            names, source = [str(i) for i in range(self.num_classes)], "numbered"
            logger.warning(
                "%s carries no label names (a `model.export()` directory?): classes are numbered 0..%d. "
                "Pass `label_names=` or export with bert_keras.export.export_classifier to name them.",
                self.export_dir, self.num_classes - 1,
            )
        return names, source

    def _stored_label_names(self):
        """The export's own `label_names()`, else `assets.extra/labels.json`'s names, else None.

        The SavedModel's names are the truth: they are what its `label` output
        serves. `labels.json` is a copy for people and other tools; a copy that
        disagrees means the export was edited after it was written, and is
        refused rather than silently preferred or ignored.
        """
        path = os.path.join(self.export_dir, "assets.extra", LABELS_FILE)
        from_file = self._labels_file_names(path)
        if not hasattr(self._saved, "label_names"):
            return from_file
        names = [name.decode("utf-8", "replace") for name in self._saved.label_names().numpy()]
        if from_file is not None and from_file != names:
            raise ValueError(
                f"{path} lists the labels {from_file}, but the SavedModel in {self.export_dir} was exported with "
                f"{names} (its `label_names()` and the `label` it serves): the export was modified after it was "
                "written. Restore the file, or pass `label_names=` to load_classifier to name the classes yourself."
            )
        return names

    @staticmethod
    def _labels_file_names(path):
        """The `label_names` list of `labels.json`, or None (with a warning when the file is unusable)."""
        try:
            with open(path) as f:
                names = json.load(f).get("label_names")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, AttributeError, RecursionError) as error:
            logger.warning("%s cannot be read (%s); ignoring it.", path, error)
            return None
        if isinstance(names, list) and all(isinstance(name, str) for name in names):
            return names
        logger.warning("%s holds no list of `label_names`; ignoring it.", path)
        return None

    def _columns(self, texts, text_pairs):
        """`(texts, pairs_or_None, single)` from the forms `predict` accepts."""
        pairs_model = len(self.inputs) == 2
        single = isinstance(texts, str) or (pairs_model and isinstance(texts, tuple) and text_pairs is None
                                            and len(texts) == 2 and all(isinstance(t, str) for t in texts))
        if single:
            texts = [texts]
            text_pairs = None if text_pairs is None else [text_pairs]
        texts = list(texts)
        if pairs_model and text_pairs is None and all(isinstance(t, (tuple, list)) and len(t) == 2 for t in texts):
            texts, text_pairs = [t[0] for t in texts], [t[1] for t in texts]
        if pairs_model and text_pairs is None:
            raise ValueError("This classifier takes text pairs: pass (text, text_pair) tuples or `text_pairs=`.")
        if not pairs_model and text_pairs is not None:
            raise ValueError(f"This classifier takes single texts (its input: {self.inputs[0]!r}); "
                             "`text_pairs` must be None.")
        for name, column in (("texts", texts), ("text_pairs", text_pairs or [])):
            bad = next((item for item in column if not isinstance(item, str)), None)
            if bad is not None:
                raise TypeError(f"Expected `{name}` to hold strings. Received an item of type "
                                f"{type(bad).__name__}: {bad!r}")
        if text_pairs is not None and len(text_pairs) != len(texts):
            raise ValueError(f"Received {len(texts)} texts and {len(text_pairs)} text pairs; pass as many of each.")
        return texts, (None if text_pairs is None else list(text_pairs)), single

    def predict_proba(self, texts, text_pairs=None, batch_size=64):
        """Class probabilities, a `(n, num_classes)` float32 array, in `label_names` order.

        An output that is not a probability distribution (logits of a
        `model.export()`) gets a softmax, row by row; a softmax keeps the
        order of the classes either way.
        """
        texts, text_pairs, _ = self._columns(texts, text_pairs)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        batches = []
        for start in range(0, len(texts), batch_size):
            columns = [texts[start : start + batch_size]] + ([text_pairs[start : start + batch_size]] if text_pairs else [])
            feed = {name: tf.constant(column, dtype=tf.string) for name, column in zip(self.inputs, columns)}
            batches.append(_as_probabilities(self._signature(**feed)[self._output].numpy()))
        return np.concatenate(batches) if batches else np.zeros((0, self.num_classes), "float32")

    def predict(self, texts, text_pairs=None, *, top_k=None, batch_size=64):
        """Classifies one text or many, as transformers' text-classification pipeline does.

        Args:
            texts: a str (one text), or a list of str. For a classifier of
                text pairs: a `(text, text_pair)` tuple, a list of them, or
                a list of str with `text_pairs`.
            text_pairs: optional list of str, the second segments.
            top_k: optional int. Keep the `top_k` best classes in `scores`,
                best first. By default every class, in `label_names` order.
            batch_size: int. Texts per call of the model. Defaults to `64`.

        Returns:
            For one text, a dict `{"label": str, "score": float, "scores":
            {label: float}}` (the most probable class, its probability, and
            the probability of every class); for a list, a list of them. A
            blank text (empty or whitespace) gets `{"label": None, "score":
            None, "scores": {}}`: there is nothing to classify.
        """
        texts, text_pairs, single = self._columns(texts, text_pairs)
        check_top_k(top_k, self.num_classes)
        blank = [not (text + (text_pairs[i] if text_pairs else "")).strip() for i, text in enumerate(texts)]
        kept = [i for i, is_blank in enumerate(blank) if not is_blank]
        pairs = None if text_pairs is None else [text_pairs[i] for i in kept]
        probabilities = self.predict_proba([texts[i] for i in kept], pairs, batch_size=batch_size)
        results = iter(labelled_predictions(probabilities, self.label_names, top_k))
        results = [blank_prediction() if is_blank else next(results) for is_blank in blank]
        return results[0] if single else results


def blank_prediction():
    """What `predict` gives a blank text (empty or only whitespace): no label, as `bert-keras predict` prints it."""
    return {"label": None, "score": None, "scores": {}}


def check_top_k(top_k, num_classes):
    """`top_k` if it is None or an int from 1 to `num_classes`, else a `ValueError` that names it."""
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= num_classes):
        raise ValueError(f"Received an invalid value for argument `top_k`, expected an integer from 1 to "
                         f"{num_classes} (the number of classes). Received: top_k={top_k!r}")
    return top_k


def labelled_predictions(probabilities, label_names, top_k=None):
    """Per row of `probabilities` `(n, num_classes)`: `{"label", "score", "scores"}` (the best class, its
    probability, and every class's, or the `top_k` best first)."""
    results = []
    for row in np.asarray(probabilities, dtype="float32"):
        best = int(row.argmax())
        order = range(len(row)) if top_k is None else np.argsort(-row, kind="stable")[:top_k]
        results.append({
            "label": label_names[best],
            "score": float(row[best]),
            "scores": {label_names[i]: float(row[i]) for i in order},
        })
    return results


def _as_probabilities(outputs):
    """`outputs` `(batch, num_classes)` as probabilities: rows that are not distributions get a softmax."""
    outputs = np.asarray(outputs, dtype="float32")
    is_distribution = np.all(outputs >= 0, axis=-1) & (np.abs(outputs.sum(axis=-1) - 1) <= 1e-3)
    shifted = np.exp(outputs - outputs.max(axis=-1, keepdims=True))
    return np.where(is_distribution[:, None], outputs, shifted / shifted.sum(axis=-1, keepdims=True))


def load_classifier(export_dir, label_names=None, warm_up=True):
    """Loads a text classifier export (see `TextClassifier`), registering tensorflow-text's ops first.

    No `import tensorflow_text` is needed before it. Plain
    `tf.saved_model.load(export_dir)` needs one, as TF Hub's BERT modules do
    (the export tokenizes with tensorflow-text's ops; without the import
    TensorFlow stops with "Op type not registered 'RegexSplitWithOffsets'"),
    and its call returns the model's outputs (logits), where `predict` here
    gives probabilities and label names. The export's warm-up requests are
    replayed first unless `warm_up=False`.
    """
    return TextClassifier(export_dir, label_names=label_names, warm_up=warm_up)
