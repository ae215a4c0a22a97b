"""The one base of the family's tokenizers: the layer's interface, what each kind knows of itself, its files.

`WordPieceTokenizer` (BERT, ELECTRA, DistilBERT), `SentencePieceTokenizer`
(ALBERT) and `BytePairTokenizer` (RoBERTa) are each a `Tokenizer`: they
answer `tokenize`, `tokenize_with_offsets`, `tokenize_with_char_offsets`,
the special ids (`cls_id`, `sep_id`, `pad_id`, `mask_id`, `unknown_id`),
`get_special_tokens_dict` and the vocabulary methods the same way, so the
preprocessor, the token-level tasks and the exports take any of them. What
differs between kinds is said once, on the class, where the rest of the
package asks it instead of branching on a kind's name:

- `kind`: the name exports and checkpoints record (`"wordpiece"`,
  `"sentencepiece"`, `"byte_bpe"`); `bert_keras.text.kinds.tokenizer_class`
  maps it back to the class;
- `files`: the files it is read from, by the attribute of a Hub module that
  carries each as an asset; `options`: the keys of Hugging Face's
  `tokenizer_config.json` it reads; `from_folder` reads both;
- `packing` and `num_special_tokens(num_segments)`: how a text pair is packed
  and how many special tokens that adds (BERT 2 / 3, RoBERTa 2 / 4);
- `tokens_to_string`, `piece_starts_word` and `piece_text`: how its pieces
  spell text, as transformers' pipelines read them.
"""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from bert_keras._checks import FileContentError, NotRegularFileError, open_regular_file, read_json, read_user_file
from bert_keras.text.decoding import starts_word_at_a_space
from bert_keras.text.packer import num_special_tokens

# Plain TensorFlow ops without Python control flow: tracing them through
# AutoGraph only makes `tf.function` and `tf.data` tracing slower.
_do_not_convert = tf.autograph.experimental.do_not_convert

# The largest `tokenizer.json` read, in bytes: XLM-R's (250,002 Unigram pieces with their scores) is about 17 MB,
# BERT's about 0.7 MB; a file past it is refused before it is read (JSON takes about ten times its size to parse).
MAX_TOKENIZER_JSON_BYTES = 32 << 20
# The largest `tokenizer_config.json` read: options, special tokens and a chat template take kilobytes; transformers'
# `added_tokens_decoder` of a few thousand tokens, a megabyte.
MAX_TOKENIZER_CONFIG_BYTES = 16 << 20
# What a file of one token a line (vocab.txt, merges.txt) cannot hold in a token: a line break ends the line for its
# readers (tensorflow-text's lookup reads to "\n" and drops a "\r" before it; Python's text mode, so transformers,
# ends a line at "\r" too), and every later id would shift. The other separators of `str.splitlines` ("\x0b",
# "\x0c", "\x1c"-"\x1e", "\x85", "\u2028", "\u2029") are read back exactly by all of them.
LINE_BREAKS = ("\n", "\r")

# The special tokens every tokenizer has, by their argument; each sets the attribute `<name>_id` too.
SPECIAL_TOKENS = ("unknown_token", "cls_token", "sep_token", "pad_token", "mask_token")


class TokenizerFileError(ValueError):
    """A tokenizer's file (`vocab.json`, `merges.txt`, `spiece.model`, `tokenizer_config.json`) that cannot be read.

    The message names the file (and the JSON key at fault, where there is one),
    as `bert_keras.formats.CheckpointError` does: `"{file}, field {key!r}: {reason}"`.

    Attributes:
        file: str. The file at fault.
        key: str or None. The key of `tokenizer_config.json` at fault.
        reason: str. What is wrong, without the file's name.
    """

    def __init__(self, file, reason, key=None):
        self.file, self.key, self.reason = os.fspath(file), key, reason
        super().__init__(self.file + (f", field {key!r}" if key is not None else "") + f": {reason}")


def read_file_bytes(path):
    """The bytes of a tokenizer's file; a `TokenizerFileError` naming it where it is not a regular file (a FIFO is
    refused without waiting, `bert_keras._checks.read_user_file`) or is a directory. A path of one of TensorFlow's
    file systems (`gs://`, `ram://`), which have no FIFOs, is read with `tf.io.gfile`."""
    path = os.fspath(path)
    if "://" in path:
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    try:
        return read_user_file(path)
    except FileContentError as error:
        raise TokenizerFileError(path, error.reason) from error


def read_json_file(path, max_bytes=None):
    """The JSON value of a tokenizer's file (`bert_keras._checks.read_json`); a `TokenizerFileError` naming it where
    it is not a regular file (a FIFO is refused without waiting), a directory, not UTF-8 JSON, or (with `max_bytes`)
    larger than `max_bytes`, which is told from the open file before anything is read: parsing JSON takes about ten
    times its size in memory."""
    if max_bytes is None:
        try:
            return read_json(path)
        except FileContentError as error:
            raise TokenizerFileError(path, error.reason) from error
    try:
        with open_regular_file(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise TokenizerFileError(path, f"is {size:,} bytes; at most {max_bytes:,} are read.")
            data = f.read(max_bytes + 1)
    except NotRegularFileError as refused:
        raise TokenizerFileError(path, f"{refused.strerror}.") from refused
    except IsADirectoryError as directory:
        raise TokenizerFileError(path, "is a directory; expected a file.") from directory
    if len(data) > max_bytes:  # grown since its size was read
        raise TokenizerFileError(path, f"is more than {max_bytes:,} bytes; at most {max_bytes:,} are read.")
    try:
        return json.loads(data.decode("utf-8"))
    # As `read_json`: not UTF-8, not JSON, an integer of more than 4,300 digits, or nested too deep.
    except (ValueError, RecursionError) as invalid:
        raise TokenizerFileError(path, f"is not valid JSON ({str(invalid)[:200]}).") from invalid


def read_tokenizer_config(folder, keys):
    """The options among `keys` that `folder/tokenizer_config.json` records, as `{key: bool}`.

    An absent file, or a key absent or `null`, gives no entry (the
    tokenizer's default applies).

    Raises:
        TokenizerFileError: the file is not a JSON object, or holds one of
            `keys` that is not `true` or `false`.
    """
    path = os.path.join(os.fspath(folder), "tokenizer_config.json")
    if not tf.io.gfile.exists(path):
        return {}
    config = read_json_file(path, MAX_TOKENIZER_CONFIG_BYTES)
    if not isinstance(config, dict):
        raise TokenizerFileError(path, f"expected a JSON object, found {type(config).__name__}.")
    options = {}
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise TokenizerFileError(path, f"expected true or false, found {value!r:.100}.", key=key)
        options[key] = value
    return options


def find_file(folder, name, other_names=()):
    """The path of file `name` in `folder` (under `name` or, failing that, one of `other_names`), or None.

    Whatever is there is found, a FIFO or a directory too: its reader refuses it naming it, rather than the folder
    being said to lack the file.
    """
    for candidate in (name, *other_names):
        path = os.path.join(os.fspath(folder), candidate)
        if os.path.exists(path):
            return path
    return None


def line_break(token):
    """The first line break (`LINE_BREAKS`) that `token` holds, or None.

    >>> line_break("a\\rb\\n")
    '\\r'
    """
    return next((c for c in token if c in LINE_BREAKS), None) if "\n" in token or "\r" in token else None


def check_bool(name, value):
    """`value` as a bool, or a Keras-style `ValueError` naming argument `name`."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a bool. Received: {name}={value!r}"
        )
    return bool(value)


def to_string_tensor(inputs, argument="inputs"):
    """Converts `inputs` to a string tensor, or raises a `TypeError` that names it."""
    if isinstance(inputs, (tf.Tensor, tf.RaggedTensor, keras.KerasTensor)):
        tensor = inputs
    else:
        try:
            tensor = tf.convert_to_tensor(inputs)
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"Received an invalid value for argument `{argument}`, expected strings "
                f"(str, bytes, or a tf.string tensor). Received: {argument}={inputs!r:.80}"
            ) from error
    if tensor.dtype != tf.string:
        raise TypeError(
            f"Received an invalid value for argument `{argument}`, expected a tensor of "
            f"dtype string (raw text). Received: {argument} with dtype={tensor.dtype.name}"
        )
    return tensor


class TracedTokenization:
    """A tokenizer's work on a batch of strings as `tf.function`s, traced once per tokenizer.

    Every function that tokenizes (a train step, an evaluation step, each
    serving signature of an export) calls them, where tracing the ops again
    took ~0.5 s per function and its first run as long again. They are held
    by this plain object, not as attributes of the layer, so that a
    SavedModel does not take them for the layer's functions.
    """

    def __init__(self, tokenize_rows, tokenize_rows_with_char_offsets):
        spec = [tf.TensorSpec([None], tf.string)]
        self.tokenize_rows = tf.function(tokenize_rows, input_signature=spec, autograph=False)
        self.tokenize_rows_with_char_offsets = tf.function(
            tokenize_rows_with_char_offsets, input_signature=spec, autograph=False
        )


class Tokenizer(keras.layers.Layer):
    """The base of the in-graph tokenizers: strings to piece ids, grouped into words, with offsets.

    A subclass sets its class attributes, calls `_set_vocabulary(tokens,
    **special_tokens)` and sets `self._traced` to a `TracedTokenization` of
    its `(batch,)` strings -> `(ids, starts, ends)` functions.

    Class attributes:
        kind: str. The name exports and checkpoints record.
        files: dict. The files the tokenizer is read from, by the attribute
            of a Hub module that carries each as an asset (TF Hub's BERT
            modules: `vocab_file`; its ALBERT modules: `sp_model_file`).
        file_arguments: dict. The same attributes -> the constructor's argument
            that takes the file.
        other_names: dict. File name -> the other names it goes by.
        options: dict. The keys of `tokenizer_config.json` (Hugging Face's)
            the tokenizer reads -> its constructor argument (and attribute).
        packing: str. `"bert"` (`[CLS] A [SEP] B [SEP]`) or `"roberta"`
            (`<s> A </s></s> B </s>`): see `bert_keras.text.packer`.
        word_start_mark: str or None. The mark its vocabulary puts on a
            piece that starts a word (SentencePiece's "▁", byte-level BPE's
            "Ġ"); None where a piece that continues one is marked instead.
        tokenizer_json_model: str or None. The `model.type` of a Hugging
            Face `tokenizer.json` the class is read from
            (`arguments_from_tokenizer_json`); None where it reads none.
    """

    kind = None
    files = {}
    file_arguments = {}
    other_names = {}
    options = {}
    packing = "bert"
    word_start_mark = None
    tokenizer_json_model = None

    def _set_vocabulary(self, vocabulary, **special):
        """Sets `vocabulary`, and `<name>_token` and `<name>_id` for each `<name>_token=token` of `special`.

        Raises:
            ValueError: a special token the vocabulary lacks, Keras-style.
        """
        index = {token: i for i, token in enumerate(vocabulary)}
        for argument, token in special.items():
            if not isinstance(token, str) or token not in index:
                raise ValueError(
                    f"Received an invalid value for argument `{argument}`, expected a token of the vocabulary "
                    f"({len(vocabulary)} tokens). Received: {argument}={token!r}, which the vocabulary lacks"
                )
            setattr(self, argument, token)
            setattr(self, argument.replace("_token", "_id"), index[token])
        self._set_plain(vocabulary=vocabulary, _token_to_id=index)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    def _set_plain(self, **attributes):
        """Sets attributes that hold plain data (strings, numbers and their lists and dicts) past Keras' tracking.

        Keras wraps a list, tuple or dict set on a layer and looks at every
        element for variables and layers to track: 0.52 of the 0.77 s that a
        30,522-piece WordPiece tokenizer took to build (its vocabulary and
        their index), measured with cProfile. Data without variables needs none of it.
        """
        for name, value in attributes.items():
            object.__setattr__(self, name, value)

    # --- What the kind says of itself -------------------------------------------------------------------------

    @classmethod
    def num_special_tokens(cls, num_segments):
        """How many special tokens the packing adds around `num_segments` segments (BERT 2 / 3, RoBERTa 2 / 4)."""
        return num_special_tokens(num_segments, cls.packing)

    @classmethod
    def lower_cases(cls):
        """Whether the tokenizer has a `lower_case` option (RoBERTa's byte-level BPE never lower-cases)."""
        return "lower_case" in cls.options.values()

    @classmethod
    def tokens_to_string(cls, tokens, suffix_indicator="##"):
        """Pieces as one string, as transformers' fast tokenizer of this kind decodes them.

        Args:
            tokens: list of str, the pieces (an unknown piece may be raw text).
            suffix_indicator: str. WordPiece's prefix of continuing pieces;
                the other kinds mark pieces otherwise.
        """
        raise NotImplementedError

    @classmethod
    def piece_starts_word(cls, token, text, start, end):
        """Whether a piece starts a word, as transformers' token-classification pipeline tells (`is_subword`).

        Args:
            token: str. The piece as the vocabulary spells it.
            text: str. The raw text.
            start, end: int. The piece's characters in `text`.

        The pipeline's rule for a tokenizer without a continuing-subword
        prefix (SentencePiece, byte-level BPE): a piece starts a word at the
        text's start, or where a space (U+0020) is just before or at its
        first character. WordPiece overrides it.
        """
        del token, end
        return starts_word_at_a_space(text, start)

    @classmethod
    def piece_text(cls, token):
        """The text a vocabulary piece stands for, without its tokenizer's marks; None where it is no text alone."""
        raise NotImplementedError

    # --- Files --------------------------------------------------------------------------------------------------

    @classmethod
    def folder_files(cls, folder):
        """The tokenizer's files in `folder`, `{attribute: path}` (`files`), each path None where it is missing."""
        return {attribute: None if folder is None else find_file(folder, name, cls.other_names.get(name, ()))
                for attribute, name in cls.files.items()}

    @classmethod
    def config_options(cls, folder):
        """The options (`options`) that `folder/tokenizer_config.json` records, as `{key: bool}`; {} without it.

        Raises:
            TokenizerFileError: the file is not a JSON object, or an option is
                not `true` or `false` (naming the file and the key).
        """
        return read_tokenizer_config(folder, cls.options)

    def tokenizer_config(self):
        """The options this tokenizer was built with, as `tokenizer_config.json` records them (`{key: bool}`)."""
        return {key: bool(getattr(self, argument)) for key, argument in self.options.items()}

    @classmethod
    def read_tokens(cls, files):
        """The tokens in id order of the tokenizer's files (`{attribute: path}`), read without building it.

        Raises:
            TokenizerFileError or ValueError: a file the tokenizer cannot read,
                naming it.
        """
        raise NotImplementedError

    @classmethod
    def arguments_from_tokenizer_json(cls, tokenizer, path):
        """The constructor's arguments that a Hugging Face `tokenizer.json` (its JSON value) gives, for a class
        with a `tokenizer_json_model`.

        Raises:
            TokenizerFileError: a file the class cannot be built from, naming `path`.
        """
        raise NotImplementedError(f"{cls.__name__} is not read from a tokenizer.json ({path}).")

    @classmethod
    def from_files(cls, files, **kwargs):
        """The tokenizer of its files (`{attribute: path}`, as `folder_files` gives them) and `kwargs`."""
        return cls(**{cls.file_arguments[attribute]: path for attribute, path in files.items()}, **kwargs)

    @classmethod
    def from_folder(cls, path, **kwargs):
        """The tokenizer of a Hugging Face folder: its `files`, and the `options` of `tokenizer_config.json`.

        `kwargs` override the options read (`lower_case` for
        `do_lower_case`, ...) and give the layer's `name`.

        Raises:
            ValueError: the folder lacks one of the files (named).
            TokenizerFileError: a file the tokenizer cannot read (named).
        """
        path = os.fspath(path)
        files = cls.folder_files(path)
        missing = [cls.files[attribute] for attribute, file in files.items() if file is None]
        if missing:
            raise ValueError(
                f"Received an invalid value for argument `path`, expected a folder holding "
                f"{' and '.join(cls.files.values())}. Received: path={path!r}, which has no {missing[0]}"
            )
        options = {cls.options[key]: value for key, value in cls.config_options(path).items()}
        options.update(kwargs)
        return cls.from_files(files, **options)

    # --- The vocabulary -----------------------------------------------------------------------------------------

    def vocabulary_size(self):
        """The number of tokens (ids run from 0 to this minus one)."""
        return len(self.vocabulary)

    def token_to_id(self, token):
        """The id of `token`; raises a `KeyError` when the vocabulary lacks it."""
        return self._token_to_id[token]

    def id_to_token(self, token_id):
        """The token of `token_id`."""
        return self.vocabulary[token_id]

    def get_special_tokens_dict(self):
        """The TF Hub preprocessor's special-token dict, as Python ints.

        Returns:
            A dict with `vocab_size`, `start_of_sequence_id` ([CLS]),
            `end_of_segment_id` ([SEP]), `padding_id` ([PAD]) and `mask_id`
            ([MASK]), all read from the vocabulary.
        """
        return {
            "vocab_size": self.vocabulary_size(),
            "start_of_sequence_id": self.cls_id,
            "end_of_segment_id": self.sep_id,
            "padding_id": self.pad_id,
            "mask_id": self.mask_id,
        }

    # --- The layer ----------------------------------------------------------------------------------------------

    @_do_not_convert
    def tokenize_with_offsets(self, inputs):
        """Like `tokenize`, and also returns each piece's byte offsets in the text the pieces are cut from.

        Returns:
            A tuple `(token_ids, starts, ends)` of ragged tensors `(batch,
            words, pieces)`: int32 ids and int64 byte offsets.
        """
        return self._rows(self._traced.tokenize_rows, inputs)

    @_do_not_convert
    def tokenize_with_char_offsets(self, inputs):
        """Like `tokenize`, and also returns where every piece is in the raw input, in code points.

        Returns:
            A tuple `(token_ids, starts, ends)` of ragged tensors `(batch,
            words, pieces)`: int32 ids and int64 code point offsets into
            `inputs` (an invalid UTF-8 sequence counts as one U+FFFD, as in
            Python's `bytes.decode(errors="replace")`).
        """
        return self._rows(self._traced.tokenize_rows_with_char_offsets, inputs)

    @_do_not_convert
    def tokenize(self, inputs):
        """Strings to int32 piece ids, a ragged tensor `(batch, words, pieces)`."""
        return self.tokenize_with_offsets(inputs)[0]

    @_do_not_convert
    def call(self, inputs):
        return self.tokenize(inputs)

    def _check_inputs(self, inputs):
        """`inputs` as a string tensor: a scalar, or `(batch,)` (`(batch, 1)` squeezed)."""
        tensor = to_string_tensor(inputs)
        rank = tensor.shape.rank
        if rank == 2 and tensor.shape[-1] == 1:
            tensor = tf.squeeze(tensor, axis=-1)
        elif rank is not None and rank > 1:
            raise ValueError(
                "Received an invalid value for argument `inputs`, expected a scalar or a batch of strings of "
                f"shape (batch,) or (batch, 1). Received: inputs.shape={tensor.shape}"
            )
        return tensor

    def _rows(self, tokenize_rows, inputs):
        """`tokenize_rows` on a batch of strings; a scalar string is a batch of one, given back without its batch."""
        inputs = self._check_inputs(inputs)
        scalar = inputs.shape.rank == 0
        if scalar:
            inputs = tf.expand_dims(inputs, 0)
        outputs = tokenize_rows(inputs)
        if scalar:
            outputs = tuple(output[0] for output in outputs)
        return outputs

    def compute_output_spec(self, inputs):
        raise NotImplementedError(
            f"{type(self).__name__} returns a tf.RaggedTensor, which Keras' functional models cannot carry; "
            "call it on tensors, or use BertPreprocessor inside a model."
        )

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in SPECIAL_TOKENS})
        return config
