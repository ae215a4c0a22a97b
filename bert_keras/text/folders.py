"""A checkpoint folder's tokenizer: where it is read from, by its kind (`bert_keras.text.kinds`).

BERT, ELECTRA and DistilBERT use WordPiece (`vocab.txt`), ALBERT SentencePiece
(`spiece.model`), RoBERTa byte-level BPE (`vocab.json` and `merges.txt`);
`tokenizer_config.json` next to them carries the options (`do_lower_case`,
`keep_accents`, `add_prefix_space`): each class says which (`files`,
`options`). A folder without them may hold Hugging Face's `tokenizer.json`
(transformers 5 saves only that), read where the class reads one
(`tokenizer_json_model`). Each place tokenizer files come from is one entry
of `SOURCES`, tried in order, so a new one is one function there; every
reader of a folder (the checkpoint readers' size checks, `LoadedCheckpoint.tokenizer`,
`bert_keras.checkpoints.load_pretrained`) goes through `read_folder`.
"""

import dataclasses
import json
import os

from bert_keras.text.base import MAX_TOKENIZER_CONFIG_BYTES, MAX_TOKENIZER_JSON_BYTES, find_file, read_json_file
from bert_keras.text.kinds import TOKENIZER_CLASSES, tokenizer_class
from bert_keras.text.tokenizer import WordPieceTokenizer
from bert_keras.text.unigram import read_pieces

TOKENIZER_JSON = "tokenizer.json"
# Views of the classes' own attributes, for the modules that still read them by kind (bert_keras.export).
TOKENIZER_ASSETS = {cls.kind: dict(cls.files) for cls in TOKENIZER_CLASSES}
TOKENIZER_FILES = {cls.kind: tuple(cls.files.values()) for cls in TOKENIZER_CLASSES}
TOKENIZER_OPTIONS = {cls.kind: dict(cls.options) for cls in TOKENIZER_CLASSES}


@dataclasses.dataclass(frozen=True)
class FolderTokenizer:
    """Where a folder's tokenizer is read from, found before anything is built.

    Attributes:
        cls: the tokenizer's class (`bert_keras.text.base.Tokenizer`).
        file: str. The file its vocabulary is read from (named in messages).
        files: dict or None. Its own files by Hub module attribute (`cls.files`),
            which a module pair carries as assets; None where it is read from
            another source (`tokenizer.json`).
        arguments: dict. The constructor's arguments read from the files
            (their paths, or the tokens themselves) and the options recorded
            (`tokenizer_config.json`'s, or `tokenizer.json`'s).
    """

    cls: type
    file: str
    files: object
    arguments: dict

    def tokens(self):
        """The tokens in id order, read without building the tokenizer.

        Raises:
            TokenizerFileError or ValueError: a file it cannot read, named.
        """
        if self.files is not None:
            return self.cls.read_tokens(self.files)
        if "proto" in self.arguments:  # SentencePiece's model, written from tokenizer.json
            return [piece for piece, _, _ in read_pieces(self.arguments["proto"])]
        return list(self.arguments["vocabulary"])

    def build(self, **kwargs):
        """The tokenizer; `kwargs` override what the folder records (`lower_case`, ...) and give its `name`."""
        return self.cls(**dict(self.arguments, **kwargs))


def _own_files(cls, folder):
    """The class's own files (`files`), with the options of `tokenizer_config.json`."""
    files = cls.folder_files(folder)
    if None in files.values():
        return None
    arguments = {cls.file_arguments[attribute]: path for attribute, path in files.items()}
    return FolderTokenizer(cls, next(iter(files.values())), files, dict(_options(cls, folder), **arguments))


def _options(cls, folder):
    """The constructor's options that `folder/tokenizer_config.json` records (`cls.options`)."""
    return {cls.options[key]: value for key, value in cls.config_options(folder).items()}


def _tokenizer_json(cls, folder):
    """Hugging Face's `tokenizer.json`, for a class that reads it (`tokenizer_json_model`); what it says wins over
    `tokenizer_config.json` (its normalizer is what transformers' fast tokenizer runs)."""
    path = find_file(folder, TOKENIZER_JSON)
    if path is None or cls.tokenizer_json_model is None:
        return None
    arguments = cls.arguments_from_tokenizer_json(read_json_file(path, MAX_TOKENIZER_JSON_BYTES), path)
    return FolderTokenizer(cls, path, None, dict(_options(cls, folder), **arguments))


# Where a folder's tokenizer files come from, first to last: `source(cls, folder) -> FolderTokenizer or None`.
SOURCES = (_own_files, _tokenizer_json)


def read_folder(folder, kind="wordpiece", vocab_file=None):
    """Where `folder`'s tokenizer of `kind` is read from: the first of `SOURCES` that has it, else None.

    Args:
        folder: str or None. The folder holding the tokenizer's files.
        kind: str. One of `bert_keras.text.kinds.TOKENIZER_KINDS`.
        vocab_file: optional str. A WordPiece vocabulary found elsewhere
            than `folder/vocab.txt` (a Google or keras-nlp checkpoint's).

    Raises:
        ValueError: `kind` unknown.
        TokenizerFileError: `tokenizer_config.json` or `tokenizer.json` that
            cannot be read, naming the file (and the key).
    """
    cls = tokenizer_class(kind)
    if cls is WordPieceTokenizer and vocab_file is not None:  # WordPiece's vocabulary goes by other names too
        vocab_file = os.fspath(vocab_file)
        options = {} if folder is None else _options(cls, folder)
        return FolderTokenizer(cls, vocab_file, {"vocab_file": vocab_file}, dict(options, vocabulary=vocab_file))
    if folder is None:
        return None
    for source in SOURCES:
        found = source(cls, os.fspath(folder))
        if found is not None:
            return found
    return None


def missing_files_message(source, kind, missing=None):
    """What a checkpoint at `source` without the files of its `kind` of tokenizer is told (`missing`: all of them)."""
    cls = tokenizer_class(kind)
    names = list(cls.files.values())
    or_json = f" (or its {TOKENIZER_JSON})" if cls.tokenizer_json_model is not None else ""
    return (f"The checkpoint at {source!r} has no {' and no '.join(missing or names)}, which its {kind} tokenizer is "
            f"read from, so no preprocessor can be built for it. Put the model's {' and '.join(names)}{or_json} next "
            "to its weights.")


def tokenizer_from_folder(folder, kind="wordpiece", lower_case=None, vocab_file=None, name="tokenizer", source=None):
    """The tokenizer of a checkpoint's folder.

    Args:
        folder: str or None. The folder holding the tokenizer's files.
        kind: str. `"wordpiece"`, `"sentencepiece"` or `"byte_bpe"`.
        lower_case: optional bool. `do_lower_case`, for a tokenizer that has
            the option (`Tokenizer.lower_cases`); defaults to what the folder
            records, else the tokenizer's default.
        vocab_file: optional str. A WordPiece vocabulary found elsewhere
            than `folder/vocab.txt` (a Google or keras-nlp checkpoint's).
        name: str. The layer's name.
        source: optional str. The checkpoint's path, named in the error
            (defaults to `folder`).

    Returns:
        A `WordPieceTokenizer`, `SentencePieceTokenizer` or `BytePairTokenizer`.

    Raises:
        ValueError: `kind` unknown, or the files it needs missing (named).
    """
    found = read_folder(folder, kind, vocab_file)
    if found is None:
        raise ValueError(missing_files_message(source or folder, kind, missing_tokenizer_files(folder, kind)))
    options = {"lower_case": lower_case} if lower_case is not None and found.cls.lower_cases() else {}
    return found.build(name=name, **options)


def model_max_length(folder, limit):
    """The longest input a checkpoint serves: `folder/tokenizer_config.json`'s `model_max_length` where it is an
    integer from 3 to `limit` (the encoder's positions), else `limit` (transformers writes 10**30 for "unknown").

    Raises:
        TokenizerFileError: the file is not UTF-8 JSON, naming it.
    """
    path = None if folder is None else find_file(folder, "tokenizer_config.json")
    config = read_json_file(path, MAX_TOKENIZER_CONFIG_BYTES) if path is not None else {}
    value = config.get("model_max_length") if isinstance(config, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 3 <= value <= limit:
        return value
    return limit


def tokenizer_file(folder, name):
    """The path of tokenizer file `name` in `folder` (under `name` or, failing that, one of its other names),
    or None where it has none."""
    other_names = next((cls.other_names[name] for cls in TOKENIZER_CLASSES if name in cls.other_names), ())
    return find_file(folder, name, other_names)


def tokenizer_options(folder, kind):
    """The options of tokenizer `kind` (its `options`) that `folder/tokenizer_config.json` records, as
    `{key: bool}`; {} without the file.

    Raises:
        TokenizerFileError: the file is not a JSON object, or an option is
            not `true` or `false` (naming the file and the key).
    """
    return tokenizer_class(kind).config_options(folder)


def missing_tokenizer_files(folder, kind):
    """The files of tokenizer `kind` that `folder` lacks (all of them where `folder` is None)."""
    return [tokenizer_class(kind).files[attribute]
            for attribute, path in tokenizer_class(kind).folder_files(folder).items() if path is None]


def write_tokenizer_files(tokenizer, directory):
    """Writes a built tokenizer's own files (`files`: WordPiece's vocab.txt, ALBERT's spiece.model, RoBERTa's
    vocab.json and merges.txt) into `directory`, as new files, for a tokenizer read from a `tokenizer.json`: what a
    module pair carries as assets. Returns `{attribute: path}`, as `tokenizer_assets` gives them.

    Raises:
        FileExistsError: one of the files exists already (nothing is replaced).
    """
    names = tokenizer.files
    contents = {}
    if getattr(tokenizer, "proto", None) is not None:  # SentencePiece's model (ALBERT's, XLM-RoBERTa's)
        contents[next(iter(names))] = tokenizer.proto
    elif "merges_file" in names:
        vocabulary = {token: index for index, token in enumerate(tokenizer.vocabulary)}
        contents["vocab_file"] = json.dumps(vocabulary, ensure_ascii=False).encode("utf-8")
        contents["merges_file"] = "".join(["#version: 0.2\n"] + [m + "\n" for m in tokenizer.merges]).encode("utf-8")
    else:
        contents["vocab_file"] = "".join(token + "\n" for token in tokenizer.vocabulary).encode("utf-8")
    paths = {}
    for attribute, data in contents.items():
        paths[attribute] = os.path.join(os.fspath(directory), names[attribute])
        with open(paths[attribute], "xb") as f:  # "x": never a file (or a link planted) already there
            f.write(data)
    return paths


def tokenizer_assets(folder, kind="wordpiece", vocab_file=None):
    """The Hub module attributes of tokenizer `kind`'s files -> their paths in `folder` (`vocab_file`: WordPiece's)."""
    cls = tokenizer_class(kind)
    if cls is WordPieceTokenizer and vocab_file is not None:
        return {"vocab_file": os.fspath(vocab_file)}
    return {attribute: path or os.path.join(os.fspath(folder), cls.files[attribute])
            for attribute, path in cls.folder_files(folder).items()}
