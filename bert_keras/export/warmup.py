"""Warm-up requests: TF Serving's `assets.extra/tf_serving_warmup_requests`, written at export, replayed at load.

A classifier export compiles its single-text path once per length bucket
(`classifier.XLA_LENGTHS`) and traces its batch path on the first request
that takes it: without warm-up, the first request of each bucket after a
load waits for a compile. TF Serving replays the requests of
`assets.extra/tf_serving_warmup_requests` (a TFRecord file of
`tensorflow.serving.PredictionLog`s) when it loads a model; `load_classifier`
replays the same file, so a Python server is warm from its first request too.
A tagger export (`export_tagger`) writes the same requests plus one text of
several windows, and `load_tagger` replays them.
"""

import logging
import math
import os
import time

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

logger = logging.getLogger(__name__)

WARMUP_FILE = "tf_serving_warmup_requests"
SIGNATURE = "serving_default"
BATCH = 8  # texts in the request that takes the batch path
_WORDS = ("a", "the", "x", "1")  # candidates for the repeated word: one word piece each in most vocabularies


def warmup_requests(preprocessor, input_names, lengths):
    """The warm-up requests of a classifier with `preprocessor`: one text per length bucket, then one batch.

    Args:
        preprocessor: the model's layer from `(batch,)` strings (a list of two
            for pairs) to the Hub input dict.
        input_names: `["text"]` or `["text", "text_pair"]`.
        lengths: the length buckets (tokens, `[CLS]` and `[SEP]` included) to
            reach; those beyond the preprocessor's packed length are left out.

    Returns:
        A list of dicts input name -> list of str, one per request.
    """
    pairs = len(input_names) == 2
    word, per_word, limit = _repeated_word(preprocessor, pairs)
    tokenizer = getattr(preprocessor, "tokenizer", None)  # [CLS] [SEP] (and the pair's [SEP]; RoBERTa's two)
    special = tokenizer.num_special_tokens(2 if pairs else 1) if hasattr(tokenizer, "num_special_tokens") else 2 + pairs
    requests = []
    for length in lengths:
        if length > limit:
            break
        words = max(1, (length - special - (per_word if pairs else 0)) // per_word)  # lands in (length - 8, length]
        columns = [" ".join([word] * words)] + ([word] if pairs else [])
        requests.append(dict(zip(input_names, [[column] for column in columns])))
    batch = [" ".join([word] * (1 + i % 5)) for i in range(BATCH)]
    requests.append(dict(zip(input_names, [batch] + ([batch[::-1]] if pairs else []))))
    return requests


def _repeated_word(preprocessor, pairs):
    """`(word, word pieces per word, packed length)` for the first candidate that is few word pieces.

    Under a WordPiece tokenizer (`BertPreprocessor`) the first candidate, one
    character, is one word piece whatever the vocabulary: its own token or
    `[UNK]`. That is read, not measured by running the preprocessor eagerly,
    which traces its tokenization once more outside the export's graph (~1.7 s
    of a tiny classifier's 9 s export, 2026-12-03, Intel Xeon). Other
    preprocessors are measured.
    """
    seq_length = getattr(preprocessor, "seq_length", None)
    # The tokenizer's kind, not its class: a loader replays this module's requests, and imports no tokenizer (Keras).
    if getattr(getattr(preprocessor, "tokenizer", None), "kind", None) == "wordpiece" and isinstance(seq_length, int):
        return _WORDS[0], 1, seq_length
    for word in _WORDS:
        one = [tf.constant([word])] + ([tf.constant([word])] if pairs else [])
        two = [tf.constant([f"{word} {word}"])] + ([tf.constant([word])] if pairs else [])
        masks = [preprocessor(texts if pairs else texts[0])["input_mask"] for texts in (one, two)]
        per_word = int(tf.reduce_sum(masks[1]) - tf.reduce_sum(masks[0]))
        if 1 <= per_word <= 4:
            return word, per_word, int(masks[0].shape[-1])
    return _WORDS[0], 1, int(masks[0].shape[-1])


def write_warmup_requests(path, requests):
    """Writes `requests` (dicts input name -> list of str) as TF Serving's warm-up file at `path`."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    with tf.io.TFRecordWriter(path) as writer:
        for inputs in requests:
            request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(signature_name=SIGNATURE))
            for name, texts in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto([t.encode("utf-8") for t in texts], dtype=tf.string))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def _texts(name, proto):
    """A request's input as a numpy array of bytes; a `ValueError` unless it holds strings, one per element.

    Read here, not by `tf.make_ndarray`, which repeats the last value up to
    the element count the shape claims: one text said to be 2**40 of them
    would be a list of 2**40 references. The file is data; it allocates
    only what it holds.
    """
    shape = [dim.size for dim in proto.tensor_shape.dim]
    count = math.prod(shape)
    if proto.dtype != tf.string.as_datatype_enum or proto.tensor_content or count != len(proto.string_val):
        raise ValueError(f"the input {name!r} of a request holds {len(proto.string_val)} value(s) for a shape of "
                         f"{count} string(s) (dtype {proto.dtype})")
    return np.array(list(proto.string_val), dtype=object).reshape(shape)


def read_warmup_requests(path):
    """The requests of a warm-up file: a list of dicts input name -> numpy array (of bytes).

    Raises:
        tf.errors.OpError: a file that is not TFRecord (a bad length or checksum).
        google.protobuf.message.DecodeError: a record that is not a `PredictionLog`.
        ValueError: an input that is not strings, or fewer or more than its shape says.
    """
    from tensorflow_serving.apis import prediction_log_pb2

    requests = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(record)
        if log.WhichOneof("log_type") == "predict_log":
            requests.append({name: _texts(name, proto) for name, proto in log.predict_log.request.inputs.items()})
    return requests


def replay(export_dir, signature, stop=None):
    """Calls `signature` on each request of the export's warm-up file; returns the seconds spent (0 without one).

    `stop`: optional `threading.Event`, checked before each request: once it is set, the requests left are not
    replayed (a background warm-up stopped before the interpreter exits, see `loaded.stop_warm_ups`).
    """
    path = os.path.join(export_dir, "assets.extra", WARMUP_FILE)
    if not os.path.isfile(path):
        return 0.0
    started = time.perf_counter()
    try:
        requests = read_warmup_requests(path)
        for done, inputs in enumerate(requests):
            if stop is not None and stop.is_set():
                logger.info("Stopped the warm-up of %s after %d of %d requests", export_dir, done, len(requests))
                return time.perf_counter() - started
            signature(**{name: tf.constant(np.asarray(values, dtype=object), dtype=tf.string)
                         for name, values in inputs.items()})
    # A damaged file (not TFRecord, a record that is not a request, inputs the signature does not take): serving
    # works, only colder.
    except (tf.errors.OpError, DecodeError, ValueError, TypeError) as error:
        logger.warning("Could not replay the warm-up requests of %s (%s); continuing without warm-up.", path, error)
        return time.perf_counter() - started
    seconds = time.perf_counter() - started
    logger.info("Warmed up %s with %d requests in %.1f s", export_dir, len(requests), seconds)
    return seconds
