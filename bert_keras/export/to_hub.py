"""Any checkpoint the converters read -> a pair of TF Hub modules (encoder, preprocess).

A recipe of two steps: read the checkpoint (`load_checkpoint`), write the
pair (`export_module_pair`).
"""

import logging
import os
import tempfile

from bert_keras._files import check_target
from bert_keras.checkpoints import load_checkpoint
from bert_keras.dtypes import check_compute_dtype
from bert_keras.export.hub_modules import export_module_pair
from bert_keras.tasks.pretrainer import checkpoint_pretrainer
from bert_keras.text.folders import write_tokenizer_files
from bert_keras.text.tokenizer import WordPieceTokenizer

logger = logging.getLogger(__name__)

STEPS = ("read the checkpoint", "write the encoder module", "write the preprocess module")


def convert_to_hub(source, out_dir, seq_length=None, overwrite=False, progress=None, dtype="float32"):
    """Converts a checkpoint into `out_dir/encoder` and `out_dir/preprocess`, written as one output.

    The pair is staged next to `out_dir` and moved into place in one step
    (`bert_keras.export.export_module_pair`), so a failed or killed run leaves
    the earlier `out_dir` (or none) and never half a pair.

    Args:
        source: a checkpoint path `load_checkpoint` reads (Hugging Face, of
            BERT or its family, original Google BERT, keras-nlp preset). The
            preprocess module tokenizes as the family does: WordPiece,
            ALBERT's SentencePiece, RoBERTa's byte-level BPE and packing.
        out_dir: str. The output directory.
        seq_length: int. The preprocess module's default sequence length, at
            most the checkpoint's `max_sequence_length`. Defaults to 128, or
            the checkpoint's `max_sequence_length` where that is shorter.
        overwrite: bool. Replace an earlier output of this package in
            `out_dir`. Defaults to `False`.
        progress: optional callable `progress(step_index, num_steps, text)`.
        dtype: str. What the encoder module computes in: `"float32"`, or
            `"bfloat16"` (float32 inputs, outputs and variables, bfloat16
            matrix products; needs a CPU with bfloat16 arithmetic, else a
            `ValueError` before anything is read). Defaults to `"float32"`.

    Returns:
        The `LoadedCheckpoint` that was exported.
    """
    out_dir = os.fspath(out_dir)
    check_target(out_dir, overwrite, argument="out_dir", kind="module_pair")
    check_compute_dtype(dtype)
    report = progress or (lambda index, total, text: logger.info("[%d/%d] %s", index, total, text))

    report(1, len(STEPS), f"{STEPS[0]}: {source}")
    loaded = load_checkpoint(source)
    # The family's tokenizer (a missing file is named here, before any writing): WordPiece's vocab.txt, ALBERT's
    # spiece.model or RoBERTa's vocab.json and merges.txt travel as the modules' assets.
    tokenizer = loaded.tokenizer(source)
    if seq_length is None:
        seq_length = min(128, loaded.encoder.max_sequence_length)
    steps = iter(range(2, len(STEPS) + 1))
    wordpiece = isinstance(tokenizer, WordPieceTokenizer)
    with tempfile.TemporaryDirectory() as scratch:
        # A folder saved by transformers 5 holds tokenizer.json alone: the tokenizer's own files are written from it.
        files = {"vocab_file": loaded.vocab_file} if wordpiece else loaded.tokenizer_files()
        if not all(path is not None and os.path.isfile(path) for path in files.values()):
            files = write_tokenizer_files(tokenizer, scratch)
        export_module_pair(
            out_dir,
            loaded.encoder,
            files["vocab_file"] if wordpiece else files,
            loaded.do_lower_case,
            seq_length=seq_length,
            pretrainer=checkpoint_pretrainer(loaded),
            overwrite=overwrite,
            info={"source": os.path.abspath(os.fspath(source))},
            progress=lambda text: report(next(steps), len(STEPS), text),
            dtype=dtype,
            # WordPiece's module is built from its vocabulary and casing, unless its folder sets other options.
            tokenizer=None if wordpiece and _default_wordpiece(tokenizer) else tokenizer,
        )
    return loaded


def _default_wordpiece(tokenizer):
    """Whether a WordPiece tokenizer normalises as BERT's does by default (accents as its casing, CJK split)."""
    return tokenizer.strip_accents is None and tokenizer.tokenize_chinese_chars
