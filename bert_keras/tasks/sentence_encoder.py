"""The `SentenceEncoder` task: raw strings in, one vector per text out, as sentence-transformers embeds them.

`SentenceEncoder` is our `BertEncoder` (or a Hub encoder layer) and
`BertPreprocessor` followed by `SentencePooling`: raw strings in, one vector
per text out. `SentenceEncoder.from_checkpoint(folder)` reproduces a
sentence-transformers folder (`modules.json`: Transformer -> Pooling ->
Normalize, `1_Pooling/config.json`, `sentence_bert_config.json` and the
tokenizer's `model_max_length`), which
`bert_keras.formats.sentence_transformers` reads as data; the BERT weights
and tokenizer come through `bert_keras.checkpoints.load_pretrained`.
Its export, a SavedModel from strings to embeddings, is
`bert_keras.export.export_sentence_encoder`. `bert_keras.embedding_files.write_embeddings`
streams the embeddings of a stream of texts into a `.npy` or `.jsonl` file,
`bert_keras.search.build_index` into an index directory, and
`bert_keras.search.load_index(...).search` finds the nearest texts of queries
by exact cosine similarity.
"""

import os

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from bert_keras.tasks._task import Task, call_encoder, check_encoder, model_inputs
from bert_keras.checkpoints import load_pretrained
from bert_keras.embedder import BatchEmbedder, EmbeddingMethods, encode_in_batches
from bert_keras.formats import detect_format
from bert_keras.formats.sentence_transformers import read_sentence_transformers_folder, tokenizer_max_length
from bert_keras.heads import POOLING_MODES, SentencePooling

__all__ = ["SentenceEncoder"]


@keras.saving.register_keras_serializable(package="bert_keras")
class TrimPadding(keras.layers.Layer):
    """The Hub input dict cut after the batch's longest row: padding columns change no real token's output.

    A preprocessor packs every text to its full length (e.g. 256 tokens);
    tweets fill a sixth of that. Attention ignores padding exactly (its
    weights are zero), so cutting it gives the same outputs for less work,
    as sentence-transformers pads each batch to its longest text only.

    Call arguments:
        inputs: the Hub input dict of int32 `(batch, seq)` tensors.

    Returns:
        The same dict, `(batch, longest)`, at least one column.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    def call(self, inputs):
        lengths = ops.sum(ops.cast(ops.not_equal(inputs["input_mask"], 0), "int32"), axis=1)  # (batch,)
        longest = ops.max(ops.concatenate([lengths, ops.ones((1,), "int32")]))  # at least 1, for an empty batch too
        return {key: value[:, :longest] for key, value in inputs.items()}  # (batch, longest)

    def compute_output_spec(self, inputs):
        return {key: keras.KerasTensor((value.shape[0], None), dtype=value.dtype) for key, value in inputs.items()}


@keras.saving.register_keras_serializable(package="bert_keras")
class SentenceEncoder(EmbeddingMethods, Task):
    """Sentence embeddings: an encoder, its preprocessor, and `SentencePooling` over the token vectors.

    Texts are packed by the preprocessor (at its `seq_length`: longer texts
    are cut there, `[CLS]` and `[SEP]` included, as sentence-transformers
    cuts at `max_seq_length`), the padding after a batch's longest text is
    cut, the encoder gives the token vectors (`sequence_output`) and the
    pooling one vector per text (mean over the real tokens, `[CLS]`, max,
    ...; optionally L2-normalised). The embedding is float32 whatever the
    encoder computes in.

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out (e.g.
            `bert_keras.hub.KerasLayer`). Reachable as `.encoder`.
        preprocessor: optional `BertPreprocessor` or Hub preprocess layer;
            the model then takes raw strings. Its `seq_length` is the maximum
            length of a text in tokens. Defaults to `None` (the Hub input dict).
        pooling: str or list of str. A mode of `SentencePooling` (`"mean"`,
            `"cls"`, `"max"`, `"mean_sqrt_len"`, `"weighted_mean"`,
            `"last_token"`), or several, concatenated. Defaults to `"mean"`.
        normalize: bool. L2-normalise the embeddings. Defaults to `False`.
        **kwargs: other `keras.Model` arguments (`name`, ...).

    Call arguments:
        inputs: strings with a preprocessor (a `(batch,)` string tensor, a
            list of str or a numpy array of them: Keras' `predict`, `fit` and
            `__call__` take each); else the Hub input dict.

    Returns:
        float32 embeddings `(batch, dim)`: `dim` is the encoder's hidden size
        times the number of pooling modes.

    Example:
    >>> from bert_keras.text.preprocessor import BertPreprocessor
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "day"] + [f"w{i}" for i in range(92)]
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32)
    >>> model = SentenceEncoder(encoder, BertPreprocessor(vocab, seq_length=16), pooling="mean", normalize=True)
    >>> vectors = model.encode(["good day", "bad day", ""])
    >>> vectors.shape, vectors.dtype
    ((3, 16), dtype('float32'))
    >>> model.similarity(vectors[:1], vectors).shape
    (1, 3)
    >>> bool(np.allclose(model.predict(["good day", "bad day", ""], verbose=0), vectors, atol=1e-6))
    True
    """

    _own_args = ("pooling", "normalize")

    def __init__(self, encoder, preprocessor=None, pooling="mean", normalize=False, **kwargs):
        check_encoder(encoder)
        # === Layers ===
        trim = TrimPadding(name="trim_padding")
        # float32: the means and norms of a bfloat16 encoder's vectors are taken in float32.
        pooling_layer = SentencePooling(pooling, normalize=normalize, dtype="float32", name="pooling")
        # === Functional model ===
        inputs, packed = model_inputs(preprocessor)
        packed = trim(packed)
        sequence_output = call_encoder(encoder, packed, "sequence_output")["sequence_output"]  # (batch, seq, hidden)
        outputs = pooling_layer(sequence_output, packed["input_mask"])  # (batch, dim)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.pooling_layer = pooling_layer
        self.pooling = pooling if isinstance(pooling, str) else list(pooling)
        self.normalize = normalize
        self.source = None  # the checkpoint `from_checkpoint` read (not part of the config)
        self._embedder = None  # a BatchEmbedder, made by the first `encode`

    @property
    def embedding_dim(self):
        """The length of an embedding."""
        return int(self.outputs[0].shape[-1])

    @property
    def max_seq_length(self):
        """The longest text in tokens (`[CLS]` and `[SEP]` included); None without a preprocessor."""
        return getattr(self.preprocessor, "seq_length", None)

    @classmethod
    def from_checkpoint(cls, path, *, pooling=None, normalize=None, max_seq_length=None, dtype=None, allow_modules=True,
                        **kwargs):
        """A sentence encoder as a sentence-transformers folder describes it, or a BERT checkpoint with a pooling.

        A sentence-transformers folder (`modules.json`: Transformer ->
        Pooling [-> Normalize]) is reproduced exactly: its pooling modes, its
        normalisation, and its maximum length (`sentence_bert_config.json`'s
        `max_seq_length`, else the tokenizer's `model_max_length`, at most the
        encoder's positions; as sentence-transformers reads them). Any other
        checkpoint `bert_keras.checkpoints.load_checkpoint` reads needs
        `pooling=`. Arguments given here override what the folder says.

        Args:
            path: str. A sentence-transformers folder or a BERT checkpoint.
            pooling: optional str or list of str. The pooling mode(s)
                (`SentencePooling`). Required without a sentence-transformers
                configuration.
            normalize: optional bool. Defaults to whether the folder lists a
                Normalize module (False for a plain checkpoint).
            max_seq_length: optional int. The longest text in tokens.
            dtype: optional dtype policy of the encoder (e.g. `"mixed_bfloat16"`).
            allow_modules: bool. Whether `path` may be a TF Hub module,
                whose graph runs when it is loaded. `False` for a path that
                came from data (`load_embedding_model`): only weights are
                read. The Transformer a sentence-transformers folder names
                is always read as weights. Defaults to `True`.
            **kwargs: other `keras.Model` arguments (`name`, ...).

        Returns:
            A `SentenceEncoder` taking raw strings; `.source` is `path`.

        Raises:
            ValueError: a folder without pooling configuration and no
                `pooling=`, a pooling mode that does not exist, a module
                other than Transformer / Pooling / Normalize, an embedding
                dimension other than the encoder's, a length beyond the
                encoder's positions.
            CheckpointError: from `bert_keras.checkpoints.load_pretrained`
                (the one way the tasks and the inspector read a folder too),
                for the weights and the tokenizer's files (`ModuleRefusedError`:
                a module, with `allow_modules=False`).

        Example:
        >>> from bert_keras.text.corpora import minilm_vocab_path  # all-MiniLM-L6-v2, from the test extra
        >>> model = SentenceEncoder.from_checkpoint(os.path.dirname(minilm_vocab_path()))
        >>> model.pooling, model.normalize, model.max_seq_length, model.embedding_dim
        ('mean', True, 256, 384)
        """
        path = os.fspath(path)
        folder = read_sentence_transformers_folder(path)
        if folder is None and pooling is None:
            detect_format(path)  # a path that is no checkpoint at all is told so first, not asked for its pooling
            raise ValueError(
                f"{path!r} has no sentence-transformers configuration (modules.json with a Pooling module and its "
                f"1_Pooling/config.json), so how to pool its token vectors is unknown. Pass `pooling=` (one of "
                f"{list(POOLING_MODES)}; sentence-transformers' default is 'mean'), e.g. "
                "SentenceEncoder.from_checkpoint(path, pooling='mean'); on the command line: --pooling mean."
            )
        if pooling is None:
            pooling = folder.pooling[0] if len(folder.pooling) == 1 else list(folder.pooling)
        SentencePooling(pooling)  # checks the mode(s) before the weights are read
        if normalize is None:
            normalize = folder.normalize if folder is not None else False
        if max_seq_length is None and folder is not None:
            max_seq_length = folder.max_seq_length
        source = folder.transformer_path if folder is not None else path
        # A folder's Transformer is a path modules.json records: data, read as weights only, whoever named the folder.
        # Without a length: the tokenizer's `model_max_length`, at most the encoder's positions.
        pretrained = load_pretrained(source, seq_length=max_seq_length, default_seq_length=tokenizer_max_length(source),
                                     dtype=dtype, allow_modules=allow_modules and folder is None,
                                     seq_length_name="max_seq_length")
        encoder, preprocessor = pretrained.encoder, pretrained.preprocessor
        if folder is not None and folder.do_lower_case and not preprocessor.lower_case:
            raise ValueError(
                f"{os.path.join(folder.transformer_path, 'sentence_bert_config.json')} sets do_lower_case for a cased "
                "vocabulary; lower-casing the text before a cased tokenizer is not reproduced."
            )
        if folder is not None and folder.dimension is not None and folder.dimension != encoder.hidden_size:
            raise ValueError(
                f"The pooling configuration of {path!r} says embedding_dimension={folder.dimension}, but the encoder's "
                f"hidden size is {encoder.hidden_size}: the folder's modules do not belong together."
            )
        model = cls(encoder, preprocessor=preprocessor, pooling=pooling, normalize=normalize, **kwargs)
        model.source = path
        return model

    def encode(self, texts, batch_size=32):
        """Embeddings of texts, as `SentenceTransformer.encode` gives them.

        Args:
            texts: a str, a list of str, or a 1-D numpy array of strings.
            batch_size: int. Texts per batch of the model; texts of similar
                lengths are batched together (longest first), two batches
                run at once (`bert_keras.embedder.BATCHES_PER_CALL`),
                and the rows are put back in input order. Defaults to `32`.

        Returns:
            float32 numpy array `(len(texts), dim)` in input order;
            `(dim,)` for a single str.
        """
        if self.preprocessor is None:
            raise ValueError(
                "This SentenceEncoder has no preprocessor, so it cannot take text: build it with `preprocessor=`, "
                "or call it on the Hub input dict."
            )
        if self._embedder is None:
            self._embedder = BatchEmbedder(lambda texts: tf.cast(self(texts, training=False), tf.float32))
        return encode_in_batches(texts, batch_size, self.embedding_dim, self._embedder)

    def predict(self, x, *args, **kwargs):
        """Keras' `predict`; an empty list of texts gives a `(0, dim)` array (Keras fails on no batch)."""
        if isinstance(x, (list, tuple, np.ndarray)) and len(x) == 0:
            return np.zeros((0, self.embedding_dim), dtype="float32")
        return super().predict(x, *args, **kwargs)
