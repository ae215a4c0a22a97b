"""DeBERTa-v3 tokenizers as transformers 5 writes them, made here: a SentencePiece Unigram model trained with the
`sentencepiece` library in DeBERTa-v3's id layout (`[PAD] [CLS] [SEP] [UNK]`, the pieces; nmt_nfkc normalisation),
converted by transformers' own `DebertaV2Tokenizer.from_pretrained` from the folder's `spm.model` (as a real
checkpoint's is) and saved with `save_pretrained`: tokenizer.json (`[MASK]` added after the pieces) and
tokenizer_config.json, no spm.model."""

import importlib
import io
import json
import os
import tempfile

import pytest

spm = pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")


def _sentencepiece_pb2():
    """transformers' own copy of SentencePiece's protobuf module: the `sentencepiece` package's needs a newer protobuf
    runtime than TensorFlow 2.21 allows, and transformers' converter imports that one first."""
    from transformers.utils import sentencepiece_model_pb2_new

    return sentencepiece_model_pb2_new


def write_deberta_tokenizer(folder, texts, size=600, spm_model=False):
    """DeBERTa-v3's tokenizer trained on `texts` with `size` pieces, saved into `folder` as transformers 5 saves it
    (with `spm_model`: the SentencePiece model alone, as the real checkpoints are downloaded). Returns the vocabulary size (the pieces and `[MASK]`; fewer pieces than `size` where the texts hold fewer)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([t for t in texts if t.strip()]), model_writer=model, vocab_size=size,
        model_type="unigram", pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]", eos_id=2, eos_piece="[SEP]",
        unk_id=3, unk_piece="[UNK]", character_coverage=0.9995, minloglevel=2, num_threads=1, hard_vocab_limit=False)
    with tempfile.TemporaryDirectory() as source:
        with open(os.path.join(source, "spm.model"), "wb") as f:
            f.write(model.getvalue())
        with open(os.path.join(source, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": False, "vocab_type": "spm"}, f)
        converter = importlib.import_module("transformers.convert_slow_tokenizer")
        original, converter.import_protobuf = converter.import_protobuf, lambda *_: _sentencepiece_pb2()
        try:
            tokenizer = transformers.DebertaV2Tokenizer.from_pretrained(source)
        finally:
            converter.import_protobuf = original
    if spm_model:
        with open(os.path.join(folder, "spm.model"), "wb") as f:
            f.write(model.getvalue())
    else:
        tokenizer.save_pretrained(str(folder))
    return len(tokenizer)
