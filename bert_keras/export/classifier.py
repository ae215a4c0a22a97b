"""The classifier export: a SavedModel that serves raw strings, and its loader.

`export_classifier` traces the model's own serving computation (a
`BertClassifier`'s `serving_outputs`); it does not re-implement the forward
pass. `load_classifier` reads what it writes, and `model.export()` directories
of classifiers built with this package.
"""

import logging
import os

import tensorflow as tf

from bert_keras.dtypes import check_compute_dtype, compute_dtype
from bert_keras.export import warmup
from bert_keras.export._serving import XLA_LENGTHS, bucket, pad_to, trim_padding
from bert_keras.export.kinds.classifier import ClassifierAnswers
from bert_keras.export.loaded import LoadedExport
from bert_keras.export.manifest import CLASSIFIER

logger = logging.getLogger(__name__)

# Where exports before the manifest (assets.extra/export.json) kept the label names.
LABELS_FILE = "labels.json"


def outputs_probabilities(model):
    """Whether a classifier's output is probabilities (a softmax) rather than logits.

    The activation of the model's last layer tells: a `BertClassifier` with
    `activation="softmax"` ends in a softmax `Activation` layer, and so does
    e.g. `Dense(3, activation="softmax")`.

    >>> import keras
    >>> text = keras.Input(shape=(4,))
    >>> outputs_probabilities(keras.Model(text, keras.layers.Dense(3, activation="softmax")(text)))
    True
    >>> outputs_probabilities(keras.Model(text, keras.layers.Dense(3)(text)))
    False
    """
    activation = getattr(model.layers[-1], "activation", None) if model.layers else None
    return getattr(activation, "__name__", None) == "softmax"  # `keras.activations.softmax`, or a function of that name


# `serve` without XLA: what a loaded classifier answers with while its warm-up compiles `serve`'s buckets.
PLAIN_ENDPOINT = "serve_plain"


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
        return trim_padding(model.preprocessor(list(texts) if len(texts) > 1 else texts[0]))

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
            lambda: compiled(pad_to(packed, bucket(shape[1]))),
            lambda: classify(packed),
        )

    return serve


def export_classifier(model, export_dir, label_names=None, overwrite=False, extra_assets=None, dtype="float32",
                      xla=False):
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
    is cut. With `xla` (float32), a single text of up to 64 tokens runs
    XLA-compiled (compiled once per length bucket, 8 to 64 tokens in steps
    of 8, on its first request, ~1 s each for MiniLM) with the last block
    computed for `[CLS]` only (`BertEncoder.pooled_output`), and a
    `serve_plain` endpoint answers without compiling while a loader warms
    the buckets up. Measured on MiniLM-L6 (docs/performance.md, "The speed
    a user feels"): XLA took 13.5 ms at batch 1 where the plain graph took
    16.2 ms, but added ~1 s of compiling to the first request of each
    length and 0.8 s to every load; LiteRT (`export_litert`) serves a single
    text faster than either. A
    classifier on Hub modules written by bert_keras is exported on the equal
    `BertEncoder` (`BertClassifier.with_native_encoder`); another module
    keeps its own graph. The TF Hub workflow's `keras.Model` (a Hub
    preprocess layer, a Hub encoder layer, a Dense head on `pooled_output`)
    is exported as the equal `BertClassifier` (`BertClassifier.from_hub_model`),
    so its export records its tokenizer and converts to LiteRT too. The
    outputs equal the model's up to float rounding.

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
        xla: bool. Compile the single-text path (float32 only), for a server
            that loads once and answers one text at a time. `load_classifier`
            loads such an export without it (`serve_plain` answers) and its
            background warm-up loads and compiles it; TF Serving runs it only
            when started with `--xla_cpu_compilation_enabled=true` (its
            default refuses a compiled function's first request, and so its
            warm-up). Defaults to `False`.
    """
    # The writer (Keras): imported where an export is written, so that loading one imports no Keras.
    from bert_keras.export._writer import output_names
    from bert_keras.tasks.classifier import BertClassifier

    export_dir = os.fspath(export_dir)
    check_compute_dtype(dtype)
    label_names = output_names(model, label_names, "label_names", "the class names",
                               "export_classifier(model, export_dir, ['negative', 'positive'])")
    num_outputs = model.outputs[0].shape[-1]
    if num_outputs != len(label_names):
        raise ValueError(
            f"The model has {num_outputs} outputs but {len(label_names)} label names were given: {label_names}."
        )
    # The TF Hub workflow's keras.Model (Hub preprocess and encoder layers, a Dense head) as the equal
    # BertClassifier: its export then records how it tokenizes, and converts to LiteRT.
    model = BertClassifier.from_hub_model(model) or model
    model = _on_native_encoder(model, dtype)
    with compute_dtype(model, dtype):
        _write_export(model, export_dir, label_names, overwrite, extra_assets, dtype, xla and dtype == "float32")
    logger.info("Exported the classifier to %s", export_dir)
    return export_dir


def _write_export(model, export_dir, label_names, overwrite, extra_assets, dtype, xla):
    from bert_keras.export._writer import ids_endpoints, write_export  # the writer (Keras): see export_classifier

    names = tf.constant(label_names)
    input_names = ["text", "text_pair"][: len(model.inputs)]
    softmax = not outputs_probabilities(model)
    signature = [tf.TensorSpec([None], tf.string, name=name) for name in input_names]
    # XLA's CPU matrix products in bfloat16 are slower than oneDNN's (measured: benchmarks/results/serving.md).
    # One function that both endpoints call: the model's graph is traced once for the two.
    run = tf.function(_serving_function(model, xla=xla), input_signature=signature, autograph=False)

    def served(outputs):
        probabilities = tf.cast(outputs, tf.float32)  # (batch, num_classes), float32 whatever the compute dtype
        if softmax:
            probabilities = tf.nn.softmax(probabilities, axis=-1)
        return {"probabilities": probabilities, "label": tf.gather(names, tf.argmax(probabilities, axis=-1))}

    def serve(*texts):
        return served(run(*texts))

    def call(*texts):  # what `model(texts)` returns: logits or probabilities, as Keras 2's SavedModels did
        return tf.cast(run(*texts), tf.float32)  # (batch, num_classes)

    endpoints = [("serve", serve, signature), ("__call__", call, signature), ("label_names", lambda: names, [])]
    requests = preprocessor = None
    if _serves_its_own_outputs(model):  # its preprocessor tells how long a text is
        requests = warmup.warmup_requests(model.preprocessor, input_names, XLA_LENGTHS)
        preprocessor = model.preprocessor
        if xla:  # `serve` compiles each length bucket on first use; this path compiles nothing
            plain = _serving_function(model, xla=False)
            endpoints.append((PLAIN_ENDPOINT, lambda *texts: served(plain(*texts)), signature))

        def probabilities_of_ids(packed, padded=False):  # (batch, num_classes)
            outputs = tf.cast(model.serving_outputs(packed, first_token_only=padded), tf.float32)
            return {"probabilities": tf.nn.softmax(outputs, axis=-1) if softmax else outputs}

        endpoints += ids_endpoints(probabilities_of_ids, lambda packed: probabilities_of_ids(packed, padded=True))
    write_export(
        model, export_dir, kind=CLASSIFIER, overwrite=overwrite, extra_assets=extra_assets, warmup_requests=requests,
        endpoints=endpoints, settings={"label_names": label_names, "inputs": input_names, "dtype": dtype},
        preprocessor=preprocessor,
    )


class ExportedClassifier(ClassifierAnswers, LoadedExport):
    """A loaded text classifier: raw strings in; per text the label and every class's score out.

    Reads a directory written by `export_classifier` (label names included)
    or by Keras' `model.export()` of a classifier built with this package
    (one or two string inputs of shape `(batch,)`, one `(batch, num_classes)`
    output of probabilities or logits). Such an export carries no label
    names: pass `label_names=`, or the classes are numbered `"0"`, `"1"`, ...
    (`label_source` then reads `"numbered"`, and a warning says so).
    Another kind of export (a tagger, a reader) is refused with the loader
    that serves it; anything else with a `ValueError` that says what was found.

    Args:
        export_dir: str. The SavedModel directory.
        label_names: optional list of str, in the order of the outputs.
            Overrides the names stored in the export.
        warm_up: `"background"`, `True` or `False`: the export's TF Serving
            warm-up requests (which `export_classifier` writes: one text per
            length bucket, one batch) replayed in a thread while the first
            texts are classified without XLA (`serve_plain`: nothing to
            compile), before returning (a server that wants every request
            warm), or not at all; see `LoadedExport`. Defaults to
            `"background"`.

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

    kind = CLASSIFIER
    expected = ("a `serving_default` signature taking one or two string tensors of shape (batch,) and returning "
                "(batch, num_classes) scores")
    accepts_unrecorded = True  # Keras' `model.export()` of a classifier records nothing

    # An export with `serve_plain` (compiled buckets in `serve`) answers on it until a warm-up has compiled `serve`.
    warms_what_is_left_out = True

    def __init__(self, export_dir, label_names=None, warm_up="background"):
        self._given_label_names = label_names
        # Without a warm-up before the first request, `serve_plain` alone is loaded; a background warm-up loads and
        # compiles the rest (`warms_what_is_left_out`), `False` never does.
        self.left_out = () if warm_up is True else (_compiled_path,)
        super().__init__(export_dir, warm_up=warm_up)

    def _check_signatures(self):
        self._signature = self._request_signature()
        self.inputs = self._input_names()
        self._output = self._output_name()
        self.num_classes = int(self._signature.structured_outputs[self._output].shape[-1])
        self.label_names, self.label_source = self._read_label_names(self._given_label_names)

    def _request_signature(self):
        """`serving_default`, or where only `serve_plain` is loaded, its function (inputs by name, the same outputs)."""
        if "serving_default" in (getattr(self._saved, "signatures", None) or {}):
            return self.serving_signature()
        plain = getattr(self._saved, PLAIN_ENDPOINT, None)
        if plain is None or not getattr(plain, "concrete_functions", None):
            return self.serving_signature()  # refused, saying what the SavedModel has
        function = plain.concrete_functions[0]
        args, _ = function.structured_input_signature
        return _ByName(function, [spec.name for spec in tf.nest.flatten(args)])

    def _loaded_whole(self):
        self._signature = self.serving_signature()

    def _input_names(self):
        _, specs = self._signature.structured_input_signature
        if not 1 <= len(specs) <= 2 or any(s.dtype != tf.string or s.shape.rank != 1 for s in specs.values()):
            found = {name: f"{spec.dtype.name} {spec.shape}" for name, spec in specs.items()}
            raise self._refuse(f"its inputs are {found}")
        serve = getattr(self._saved, "serve", None) or getattr(self._saved, PLAIN_ENDPOINT, None)
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
        """The export's own `label_names()`, else the manifest's names, else None.

        The SavedModel's names are the truth: they are what its `label` output
        serves. The manifest's are a copy for people and other tools; a copy
        that disagrees means the export was edited after it was written, and
        is refused rather than silently preferred or ignored.
        """
        from_file = self.setting("label_names")
        if not (isinstance(from_file, list) and all(isinstance(name, str) for name in from_file)):
            if from_file is not None:
                logger.warning("%s: the manifest holds no list of `label_names`; ignoring it.", self.export_dir)
            from_file = None
        if not hasattr(self._saved, "label_names"):
            return from_file
        names = [name.decode("utf-8", "replace") for name in self._saved.label_names().numpy()]
        if from_file is not None and from_file != names:
            raise ValueError(
                f"The manifest of {self.export_dir} lists the labels {from_file}, but the SavedModel was exported "
                f"with {names} (its `label_names()` and the `label` it serves): the export was modified after it was "
                "written. Restore the file, or pass `label_names=` to load_classifier to name the classes yourself."
            )
        return names

    def _scores(self, columns):
        """The outputs `(batch, num_classes)` for lists of str in `inputs` order: `serving_default`, or, while a
        background warm-up compiles its length buckets, the export's `serve_plain` (the same outputs, compiled
        nothing)."""
        plain = getattr(self._saved, PLAIN_ENDPOINT, None)
        if plain is not None and not self.warmed.is_set():
            with self.requesting():
                outputs = plain(*(tf.constant(column, tf.string) for column in columns))["probabilities"].numpy()
        else:
            outputs = self.run("serving_default", **dict(zip(self.inputs, columns)))[self._output]
        self.answered()
        return outputs

    def _instantiate(self):
        self.serving_signature()(**{name: tf.constant(["a"]) for name in self.inputs})


def _compiled_path(served):
    """What a classifier loads without `serve`'s compiled buckets: where the export has `serve_plain` (written with
    `xla`), the endpoints that hold them (`serve`, `serving_default`, `__call__`): a MiniLM classifier's load took
    1.3-1.4 s with them, 0.9-1.0 s without (2-core AMD EPYC)."""
    return ("serve", "serving_default", "__call__") if PLAIN_ENDPOINT in served else ()


class _ByName:
    """A function of positional string tensors called as a signature is, by input name."""

    def __init__(self, function, names):
        self._function, self._names = function, names
        self.structured_outputs = function.structured_outputs
        specs = tf.nest.flatten(function.structured_input_signature[0])
        self.structured_input_signature = ((), dict(zip(names, specs)))

    def __call__(self, **inputs):
        return self._function(*(inputs[name] for name in self._names))


def load_classifier(export_dir, label_names=None, warm_up="background"):
    """Loads a text classifier export (see `ExportedClassifier`), registering tensorflow-text's ops first.

    No `import tensorflow_text` is needed before it. Plain
    `tf.saved_model.load(export_dir)` needs one, as TF Hub's BERT modules do
    (the export tokenizes with tensorflow-text's ops; without the import
    TensorFlow stops with "Op type not registered 'RegexSplitWithOffsets'"),
    and its call returns the model's outputs (logits), where `predict` here
    gives probabilities and label names. The export's warm-up requests are
    replayed first unless `warm_up=False`.
    """
    return ExportedClassifier(export_dir, label_names=label_names, warm_up=warm_up)


# The name of earlier versions.
TextClassifier = ExportedClassifier
