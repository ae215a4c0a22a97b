"""RoBERTa's BPE bounds the cost of a word: one longer than `MAX_MERGED_BYTES` is merged in parts of that many bytes.

The merge loop runs one round per merge rank a word uses, each over every symbol of the batch: a run of 128,000
letters took 23 s with a 20,000-token vocabulary (1 MB: minutes). Words up to the bound (every chunk of the 38,158
tweets: the longest is 465 bytes) keep the reference's ids; longer ones get the ids of their parts.
"""

import random

import pytest
import tensorflow as tf

from bert_keras.text.byte_bpe import MAX_MERGED_BYTES
from bert_keras.text.folders import read_folder
from tests.text.test_tokenizer_json import reference, save_transformers_tokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")


def test_words_past_the_bound_are_merged_in_parts(tmp_path, tweets):
    folder = save_transformers_tokenizer("roberta", tmp_path, tweets)
    tokenizer, expected = read_folder(folder, "byte_bpe").build(), reference(folder)
    rng = random.Random(2)
    # "the" straddles the first parts' edge: merged whole, "t" and "h" join; in parts they cannot.
    word = "".join(rng.choice("etaoinshrdlucmfw") for _ in range(MAX_MERGED_BYTES - 1)) + "the"
    word += "".join(rng.choice("etaoinshrdlucmfw") for _ in range(MAX_MERGED_BYTES + 98))

    def ids(text):
        return sum(tokenizer.tokenize(tf.constant([text])).to_list()[0], [])

    assert ids(word[:MAX_MERGED_BYTES]) == expected.encode(word[:MAX_MERGED_BYTES], add_special_tokens=False).ids  # at the bound: exact
    parts = [word[i : i + MAX_MERGED_BYTES] for i in range(0, len(word), MAX_MERGED_BYTES)]
    assert [len(part) for part in parts] == [1024, 1024, 100]
    assert ids(word) == sum((expected.encode(part, add_special_tokens=False).ids for part in parts), [])
    assert ids(word) != expected.encode(word, add_special_tokens=False).ids  # merged whole, the pieces at the parts' edges differ
    # The same word among short ones (one batch, one loop): each word keeps its own ids.
    assert ids(f"hello {word} world") == ids("hello") + ids(" " + word) + ids(" world")
