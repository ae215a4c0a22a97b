"""One way from a folder to an encoder, its tokenizer and its preprocessor, the format detected once.

The tasks (`from_checkpoint`, `load_encoder_and_preprocessor`), the sentence
encoder and the inspector all call `load_pretrained`: one detection of the
format (`formats.detect_format`), one reading of the weights, one tokenizer
read from the folder as every reader reads it (`bert_keras.text.folders`:
its own files, else a `tokenizer.json`), one check of the packed length,
with one wording of every refusal.
"""

import dataclasses
import os

from bert_keras import hub
from bert_keras._checks import check_int
from bert_keras.checkpoints._build import load
from bert_keras.formats import detect_format, read_checkpoint
from bert_keras.formats.hub_module import ENCODER_DIR, PREPROCESS_DIR, SAVED_MODEL_FILE, read_module_pair
from bert_keras.text import BertPreprocessor

DEFAULT_SEQ_LENGTH = 128


@dataclasses.dataclass
class Pretrained:
    """What `load_pretrained` read from a folder.

    Attributes:
        encoder: `BertEncoder`, or for a Hub module pair kept as layers
            (`module_pair_layers=True`) its `hub.KerasLayer`.
        tokenizer: the folder's `bert_keras.text.Tokenizer`; None for a module
            pair kept as layers (its preprocess module tokenizes in its graph),
            and for a family whose tokenizer is not read yet (DeBERTa-v3's:
            then `preprocessor` is None too, and the encoder takes ids).
        preprocessor: `BertPreprocessor` of the tokenizer at `seq_length`, or
            the module pair's `hub.PreprocessLayer`.
        loaded: `LoadedCheckpoint` (heads, vocabulary, summary); None for a
            module pair kept as layers.
        format: str. The format detected (`formats.FORMATS`), read once.
        tokenizer_folder: str or None. The folder the tokenizer was read from.
    """

    encoder: object
    tokenizer: object
    preprocessor: object
    loaded: object
    format: str
    tokenizer_folder: object = None

    @property
    def seq_length(self):
        """The length the preprocessor packs to; None without a preprocessor."""
        return None if self.preprocessor is None else self.preprocessor.seq_length


def module_pair_dirs(path):
    """`(encoder_dir, preprocess_dir)` when `path` is a Hub module pair (one `export_module_pair` wrote, or an
    `encoder/` and a `preprocess/` SavedModel side by side), else None. Read as files: nothing is loaded."""
    if isinstance(path, (tuple, list)):
        return None
    pair = read_module_pair(path)
    if pair is not None:
        return pair
    dirs = (os.path.join(path, ENCODER_DIR), os.path.join(path, PREPROCESS_DIR))
    return dirs if all(os.path.isfile(os.path.join(d, SAVED_MODEL_FILE)) for d in dirs) else None


def load_pretrained(path, *, seq_length=None, default_seq_length=DEFAULT_SEQ_LENGTH, format=None, with_heads=False,
                    dtype=None, allow_modules=True, module_pair_layers=False, seq_length_name="seq_length"):
    """The encoder, tokenizer and preprocessor of a checkpoint folder (or Hub module), read once.

    Args:
        path: str. Anything `load_checkpoint` reads: a Hugging Face folder of
            the family, Google BERT, keras-nlp, a TF Hub / Model Garden
            module. With `module_pair_layers`, also a tuple of two Hub
            handles `(encoder, preprocess)`.
        seq_length: optional int. The length the preprocessor packs to; at
            most the encoder's `max_sequence_length` (else a `ValueError`
            naming `seq_length_name`).
        default_seq_length: optional int. The length where `seq_length` is
            None, cut to the encoder's positions; None: the encoder's
            positions. Defaults to `128`.
        format: optional str. The format, where the caller detected it
            already (`formats.detect_format`); detected here otherwise.
        with_heads: bool or list of head names, as `load_checkpoint` takes
            it. Defaults to `False`.
        dtype: optional dtype policy of the built models.
        allow_modules: bool. Whether `path` may be a module, whose graph runs
            when it is loaded; `False` for a path that came from data.
            Defaults to `True`.
        module_pair_layers: bool. Keep a Hub module pair (`module_pair_dirs`)
            as its own layers (`hub.KerasLayer`, `hub.PreprocessLayer`, as
            the tasks train it) instead of converting its encoder. Defaults
            to `False`.
        seq_length_name: str. The argument `seq_length` is named by in errors.

    Returns:
        `Pretrained`.

    Raises:
        CheckpointError: from the reader, naming the file at fault (a
            tokenizer file or `tokenizer.json` that does not fit the weights).
        ValueError: the tokenizer's files missing (named: "The checkpoint at
            ... has no spiece.model, which its sentencepiece tokenizer is read
            from ..."), or a `seq_length` beyond the encoder's positions.
    """
    if seq_length is not None:
        check_int(seq_length_name, seq_length, minimum=3)
    if isinstance(path, (tuple, list)):
        if not module_pair_layers or len(path) != 2:
            raise ValueError("Received an invalid value for argument `path`, expected a checkpoint path or a pair of "
                             f"Hub handles (encoder, preprocess). Received: path={path!r}")
        format, pair = "hub_module", tuple(path)
    else:
        path = os.fspath(path)
        format = format or detect_format(path)
        # A module given as data is refused by `read_checkpoint` below, as any module.
        keep = module_pair_layers and allow_modules and format == "hub_module" and os.path.isdir(path)
        pair = module_pair_dirs(path) if keep else None
    if pair is not None:
        return _module_pair(pair, seq_length, default_seq_length, seq_length_name)
    loaded = load(read_checkpoint(path, format=format, with_heads=with_heads, allow_modules=allow_modules), dtype)
    seq_length = _seq_length(seq_length, default_seq_length, loaded.encoder.max_sequence_length,
                             "the encoder's max_sequence_length={}", seq_length_name)
    if loaded.tokenizer_kind is None:  # a family whose tokenizer is not read yet (DeBERTa-v3's): the encoder, fed ids
        return Pretrained(loaded.encoder, None, None, loaded, format, loaded.tokenizer_folder)
    tokenizer = loaded.tokenizer(path)  # the family's: WordPiece, ALBERT's SentencePiece or RoBERTa's BPE
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=seq_length, name="preprocessor")
    return Pretrained(loaded.encoder, tokenizer, preprocessor, loaded, format, loaded.tokenizer_folder)


def _module_pair(pair, seq_length, default_seq_length, seq_length_name):
    encoder_dir, preprocess_dir = pair
    encoder = hub.KerasLayer(encoder_dir, trainable=True, name="encoder")
    max_length = _module_max_length(encoder)
    seq_length = _seq_length(seq_length, default_seq_length, max_length, "the encoder module's {} positions",
                             seq_length_name)
    preprocessor = hub.PreprocessLayer(preprocess_dir, seq_length=seq_length, name="preprocessor")
    return Pretrained(encoder, None, preprocessor, None, "hub_module")


def _module_max_length(encoder_layer):
    """Rows of a Hub encoder's learned position table (ours and Model Garden's name it so), or None."""
    for variable in encoder_layer.resolved_object.variables:
        if "position" in variable.name and len(variable.shape) == 2:
            return int(variable.shape[0])
    return None


def _seq_length(seq_length, default, max_length, limit, name):
    """`seq_length` checked against `max_length` (None: unknown), or the default cut to it."""
    if seq_length is None:
        seq_length = default or max_length or DEFAULT_SEQ_LENGTH
        return min(seq_length, max_length) if max_length is not None else seq_length
    if max_length is not None and seq_length > max_length:
        raise ValueError(f"Received an invalid value for argument `{name}`, expected at most "
                         f"{limit.format(max_length)}. Received: {name}={seq_length}")
    return seq_length


__all__ = ["Pretrained", "load_pretrained", "module_pair_dirs"]
