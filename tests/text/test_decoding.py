"""text.decoding: each tokenizer kind's pieces read as text without TensorFlow, as the tokenizer classes read them."""

import subprocess
import sys

import pytest

from bert_keras.text.decoding import DECODINGS, decoding_of
from bert_keras.text.kinds import TOKENIZER_KINDS, tokenizer_class

TOKENS = {
    "wordpiece": ["new", "york", "##er", ",", "hi", "##!", "[UNK]"],
    "sentencepiece": ["\u2581new", "\u2581york", "er", "\u2581", ",", "\u2581hi"],
    "byte_bpe": ["\u0120New", "\u0120York", "er", ",", "\u0120\u00e2\u0138", "\u0123", "caf\u00c3\u00a9"],
    "modernbert_bpe": ["\u0120New", "\u0120York", "er", ",", "\u0120\u00e2\u0138", "\u0123", "caf\u00c3\u00a9"],
}


def test_every_tokenizer_kind_has_its_decoding_and_reads_pieces_as_its_class():
    assert list(DECODINGS) == list(TOKENIZER_KINDS)
    text = "New Yorker, hi! caf\u00e9"
    for kind, tokens in TOKENS.items():
        cls, decoding = tokenizer_class(kind), decoding_of(kind)
        assert decoding.tokens_to_string(tokens) == cls.tokens_to_string(tokens)
        assert [decoding.piece_text(t) for t in tokens] == [cls.piece_text(t) for t in tokens]
        for start, end in ((0, 3), (4, 7), (7, 10), (10, 11), (12, 14), (16, 20)):
            token = tokens[min(start, len(tokens) - 1) % len(tokens)]
            assert decoding.piece_starts_word(token, text, start, end) == cls.piece_starts_word(token, text, start,
                                                                                                 end)
    assert decoding_of("byte_bpe").tokens_to_string(TOKENS["byte_bpe"][:3]) == " New Yorker"
    with pytest.raises(ValueError, match=r"expected one of \['wordpiece', 'sentencepiece', 'byte_bpe', 'unigram', "
                                         r"'modernbert_bpe', 'deberta_unigram'\]. "
                                         r"Received: kind='bpe'"):
        decoding_of("bpe")


def test_grouping_entities_imports_no_tensorflow():
    script = ("import sys\nfrom bert_keras.export.entity_groups import tokens_to_string\n"
              "print(tokens_to_string(['\\u2581new', '\\u2581york'], tokenizer='sentencepiece'), "
              "'tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "new york False"
