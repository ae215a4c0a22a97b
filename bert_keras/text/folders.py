"""The tokenizer of a checkpoint folder, by the family's kind of tokenizer: WordPiece, SentencePiece or byte-level BPE.

BERT, ELECTRA and DistilBERT use WordPiece (`vocab.txt`), ALBERT SentencePiece
(`spiece.model`), RoBERTa byte-level BPE (`vocab.json` and `merges.txt`);
`tokenizer_config.json` next to them carries the options (`do_lower_case`,
`keep_accents`, `add_prefix_space`).
"""

import os

from bert_keras.text._subword import read_tokenizer_config
from bert_keras.text.byte_bpe import BytePairTokenizer
from bert_keras.text.sentencepiece import SentencePieceTokenizer
from bert_keras.text.tokenizer import WordPieceTokenizer

# Kind of tokenizer -> its files, all needed, by the attribute that carries each as an asset of a Hub module (TF
# Hub's BERT modules: `vocab_file`; its ALBERT modules: `sp_model_file`; RoBERTa has none on TF Hub: ours).
TOKENIZER_ASSETS = {
    "wordpiece": {"vocab_file": "vocab.txt"},
    "sentencepiece": {"sp_model_file": "spiece.model"},
    "byte_bpe": {"vocab_file": "vocab.json", "merges_file": "merges.txt"},
}
TOKENIZER_FILES = {kind: tuple(files.values()) for kind, files in TOKENIZER_ASSETS.items()}
# Kind of tokenizer -> its options: the key in tokenizer_config.json (Hugging Face's) -> the tokenizer's attribute.
TOKENIZER_OPTIONS = {
    "wordpiece": {"do_lower_case": "lower_case"},
    "sentencepiece": {"do_lower_case": "lower_case", "keep_accents": "keep_accents"},
    "byte_bpe": {"add_prefix_space": "add_prefix_space"},
}
# Other names a file goes by: google-research/albert's tars name the SentencePiece model `30k-clean.model`.
OTHER_NAMES = {"spiece.model": ("30k-clean.model",)}


def tokenizer_file(folder, name):
    """The path of tokenizer file `name` in `folder` (under `name` or, failing that, one of its other names),
    or None where it has none."""
    for candidate in (name, *OTHER_NAMES.get(name, ())):
        path = os.path.join(os.fspath(folder), candidate)
        if os.path.isfile(path):
            return path
    return None


def tokenizer_options(folder, kind):
    """The options of tokenizer `kind` (`TOKENIZER_OPTIONS`) that `folder/tokenizer_config.json` records, as
    `{key: bool}`; {} without the file.

    Raises:
        TokenizerFileError: the file is not a JSON object, or an option is
            not `true` or `false` (naming the file and the key).
    """
    return read_tokenizer_config(folder, TOKENIZER_OPTIONS[kind])


def missing_tokenizer_files(folder, kind):
    """The files of tokenizer `kind` that `folder` lacks (all of them where `folder` is None)."""
    files = TOKENIZER_FILES[kind]
    if folder is None:
        return list(files)
    return [name for name in files if tokenizer_file(folder, name) is None]


def tokenizer_from_folder(folder, kind="wordpiece", lower_case=None, vocab_file=None, name="tokenizer", source=None):
    """The tokenizer of a checkpoint's folder.

    Args:
        folder: str or None. The folder holding the tokenizer's files.
        kind: str. `"wordpiece"`, `"sentencepiece"` or `"byte_bpe"`.
        lower_case: optional bool. `do_lower_case` of a WordPiece or
            SentencePiece tokenizer; defaults to the folder's
            `tokenizer_config.json` (SentencePiece) or `True` (WordPiece).
        vocab_file: optional str. A WordPiece vocabulary found elsewhere
            than `folder/vocab.txt` (a Google or keras-nlp checkpoint's).
        name: str. The layer's name.
        source: optional str. The checkpoint's path, named in the error
            (defaults to `folder`).

    Returns:
        A `WordPieceTokenizer`, `SentencePieceTokenizer` or `BytePairTokenizer`.

    Raises:
        ValueError: `kind` unknown, or a file it needs missing (named).
    """
    if kind not in TOKENIZER_FILES:
        raise ValueError(f"Received an invalid value for argument `kind`, expected one of {sorted(TOKENIZER_FILES)}. "
                         f"Received: kind={kind!r}")
    if kind == "wordpiece" and vocab_file is not None:
        return WordPieceTokenizer(vocab_file, lower_case=True if lower_case is None else lower_case, name=name)
    missing = missing_tokenizer_files(folder, kind)
    if missing:
        raise ValueError(
            f"The checkpoint at {source or folder!r} has no {' and no '.join(missing)}, which its {kind} tokenizer is read "
            f"from, so no preprocessor can be built for it. Put the model's {' and '.join(TOKENIZER_FILES[kind])} "
            "next to its weights."
        )
    folder = os.fspath(folder)
    if kind == "wordpiece":
        return WordPieceTokenizer(os.path.join(folder, "vocab.txt"), lower_case=True if lower_case is None else lower_case,
                                  name=name)
    if kind == "sentencepiece":
        options = {} if lower_case is None else {"lower_case": lower_case}
        return SentencePieceTokenizer.from_folder(folder, name=name, **options)
    return BytePairTokenizer.from_folder(folder, name=name)


def tokenizer_assets(folder, kind="wordpiece", vocab_file=None):
    """The Hub module attributes of tokenizer `kind`'s files -> their paths in `folder` (`vocab_file`: WordPiece's)."""
    if kind == "wordpiece" and vocab_file is not None:
        return {"vocab_file": os.fspath(vocab_file)}
    return {
        attribute: tokenizer_file(folder, file) or os.path.join(os.fspath(folder), file)
        for attribute, file in TOKENIZER_ASSETS[kind].items()
    }
