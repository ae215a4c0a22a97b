"""Attention pages for BERT's family: ALBERT (SentencePiece), RoBERTa (byte-level BPE), ELECTRA and DistilBERT
(WordPiece), from tiny random Hugging Face folders whose tokenizers are trained on tweets
(tests/test_family_workflows.py makes them).

The tokens shown are the family tokenizer's own pieces (transformers' tokenizers; for ALBERT the `sentencepiece`
library on ALBERT's preprocessing), the ids are those of the family's preprocessor everywhere else
(`load_encoder_and_preprocessor`), and the last hidden states are the encoder's `sequence_output`.
"""

import json
import os

import numpy as np
import pytest

from bert_keras.checkpoints import load_checkpoint
from bert_keras.cli import main
from bert_keras.inspection import Inspector, attention_statistics, is_punctuation, piece_text, probe
from bert_keras.tasks import load_encoder_and_preprocessor
from bert_keras.text import BertPreprocessor
from tests.test_family_workflows import FAMILIES, SEQ, families, spm, transformers, tweets  # noqa: F401 (fixtures)
from tests.test_family_workflows import unigram_reference
from tests.text.test_sentencepiece import albert_reference_text

# Texts that fit, and one that does not (truncated to SEQ); no empty text: an inspection needs a word.
TEXTS = ["Good morning, the world!", "  Héllo\t ``World''  ", "😀 👨\u200d👩\u200d👧 中文字符", "word " * 40]
HAS_TOKEN_TYPES = {"albert": True, "electra": True, "distilbert": False, "roberta": False, "xlm-roberta": False}
# The families packed RoBERTa's way (`<s> A </s></s> B </s>`).
ROBERTA_PACKING = ("roberta", "xlm-roberta")


@pytest.fixture(scope="module")
def inspectors(families):  # noqa: F811 (the fixture imported above)
    """name -> `Inspector.from_checkpoint(folder)`, built once."""
    return {name: Inspector.from_checkpoint(folder, seq_length=SEQ) for name, (_, folder) in families.items()}


@pytest.fixture(scope="module")
def preprocessors(families):  # noqa: F811
    """name -> the family's preprocessor as the tasks build it (`load_encoder_and_preprocessor`)."""
    return {name: load_encoder_and_preprocessor(folder, seq_length=SEQ)[1] for name, (_, folder) in families.items()}


def reference_tokens(name, folder, texts, max_length=SEQ):
    """The family tokenizer's pieces of each text, special tokens included, cut to `max_length`."""
    kind = FAMILIES[name][3]
    if kind == "sentencepiece":  # ALBERT's definition: its preprocessing, then sentencepiece, [CLS] ... [SEP]
        processor = spm.SentencePieceProcessor(model_file=os.path.join(folder, "spiece.model"))
        rows = [processor.encode(albert_reference_text(t), out_type=int)[: max_length - 2] for t in texts]
        return [["[CLS]"] + [processor.id_to_piece(i) for i in row] + ["[SEP]"] for row in rows]  # <unk> as spelled
    if kind == "unigram":  # XLM-RoBERTa: the tokenizers library on its tokenizer.json, <s> ... </s>
        reference = unigram_reference(folder)
        rows = [e.ids[: max_length - 2] for e in reference.encode_batch(texts, add_special_tokens=False)]
        return [["<s>"] + [reference.id_to_token(i) for i in row] + ["</s>"] for row in rows]
    if kind == "wordpiece":
        reference = transformers.BertTokenizerFast(vocab=os.path.join(folder, "vocab.txt"), do_lower_case=True)
    else:
        reference = transformers.RobertaTokenizerFast.from_pretrained(folder)
    ids = reference(texts, truncation=True, max_length=max_length)["input_ids"]
    return [reference.convert_ids_to_tokens(row) for row in ids]


# The WordPiece families take the path BERT's pages always took: in the slow part.
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in ("distilbert", "electra") else n for n in sorted(FAMILIES)]
)
def test_tokens_ids_attention_and_hidden_states(families, inspectors, preprocessors, name):  # noqa: F811
    _, folder = families[name]
    inspector = inspectors[name]
    assert inspector.tokenizer_kind == FAMILIES[name][3]
    # vocab_file: a WordPiece checkpoint's vocab.txt (callers build reference tokenizers from it), else None.
    assert inspector.vocab_file == (os.path.join(folder, "vocab.txt") if FAMILIES[name][3] == "wordpiece" else None)
    results = inspector.inspect(TEXTS)
    assert [r.tokens for r in results] == reference_tokens(name, folder, TEXTS)
    if name == "albert":
        assert results[0].tokens[:3] == ["[CLS]", "\u2581good", "\u2581morning"]
    if name == "roberta":
        assert results[0].tokens[0] == "<s>" and results[0].tokens[-1] == "</s>" and "\u0120the" in results[0].tokens
    whole = reference_tokens(name, folder, TEXTS, max_length=1000)
    assert [r.num_wordpieces for r in results] == [len(tokens) - 2 for tokens in whole]
    assert [r.truncated for r in results] == [len(tokens) > SEQ for tokens in whole]
    assert results[-1].truncated and not results[0].truncated

    # The ids of the family's preprocessor elsewhere (the tasks', the exports'), padding cut.
    packed = {key: np.asarray(value) for key, value in preprocessors[name](np.array(TEXTS)).items()}
    inputs, _ = inspector.encode(TEXTS)
    length = inputs["input_word_ids"].shape[1]
    assert length == SEQ  # the truncated text fills the batch
    np.testing.assert_array_equal(inputs["input_word_ids"], packed["input_word_ids"])
    np.testing.assert_array_equal(inputs["input_mask"], packed["input_mask"])

    encoder = load_checkpoint(folder, with_heads=False).encoder
    sequence = np.asarray(encoder(packed)["sequence_output"])
    layers, heads = encoder.num_layers, encoder.num_heads
    for b, result in enumerate(results):
        n = len(result.tokens)
        assert n == int(packed["input_mask"][b].sum())
        assert result.attention.shape == (layers, heads, n, n) == (2, 4, n, n)
        np.testing.assert_allclose(result.attention.sum(-1), 1.0, atol=1e-5)
        assert result.hidden_states.shape == (layers + 1, n, 32)
        assert float(np.abs(result.hidden_states[-1] - sequence[b, :n]).max()) < 1e-5


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_pairs_pack_as_the_family_and_type_ids_follow_the_model(inspectors, preprocessors, name):
    # The last pair has 21 pieces: with [CLS] A [SEP] B [SEP] they fill SEQ = 24; RoBERTa's fourth special
    # token (<s> A </s></s> B </s>) leaves room for 20 only.
    first, second = ["good morning all", "a", " ".join(["a"] * 11)], ["see you", "b c d", " ".join(["a"] * 10)]
    results = inspectors[name].inspect(first, second)
    assert results[2].num_wordpieces == 21
    assert results[2].truncated is (name in ROBERTA_PACKING) and not results[0].truncated
    packed = preprocessors[name]([np.array(first), np.array(second)])
    for b, result in enumerate(results):
        n = len(result.tokens)
        ids = np.asarray(packed["input_word_ids"])[b, :n]
        assert result.tokens == [inspectors[name].vocabulary[i] for i in ids]
        if HAS_TOKEN_TYPES[name]:
            assert result.type_ids == np.asarray(packed["input_type_ids"])[b, :n].tolist()
            assert result.type_ids[0] == 0 and result.type_ids[-1] == 1
        else:  # no token types (DistilBERT has no table, RoBERTa one row): nothing to tell the segments apart
            assert result.type_ids == [0] * n
    if name in ROBERTA_PACKING:  # <s> A </s></s> B </s>
        assert results[1].tokens[0] == "<s>" and results[1].tokens.count("</s>") == 3
        assert results[1].tokens[results[1].tokens.index("</s>") + 1] == "</s>"
    else:
        assert results[1].tokens.count("[SEP]") == 2


@pytest.mark.slow  # 4 s in the full run of 450d6b9
def test_constructor_takes_a_preprocessor_and_checks_it(families):  # noqa: F811
    _, folder = families["albert"]
    encoder, preprocessor = load_encoder_and_preprocessor(folder, seq_length=SEQ)
    inspector = Inspector(encoder, preprocessor=preprocessor)
    assert inspector.seq_length == SEQ and inspector.vocab_file is None
    assert inspector.inspect(["good morning"])[0].tokens[0] == "[CLS]"
    with pytest.raises(ValueError, match="Expected exactly one of the arguments `vocab_file` and `preprocessor`"):
        Inspector(encoder, ["[PAD]"], preprocessor=preprocessor)
    with pytest.raises(TypeError, match="expected a bert_keras BertPreprocessor. Received: preprocessor of type str"):
        Inspector(encoder, preprocessor="spiece.model")
    other = BertPreprocessor(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good"])
    with pytest.raises(ValueError, match="preprocessor's WordPieceTokenizer has 6 tokens but the encoder's vocab_size "
                                         f"is {encoder.vocab_size}"):
        Inspector(encoder, preprocessor=other)


@pytest.mark.parametrize("token, kind, text, punctuation", [
    ("##!", "wordpiece", "!", True),
    ("\u2581.", "sentencepiece", ".", True),
    ("...", "sentencepiece", "...", True),
    ("\u2581", "sentencepiece", "", False),
    ("\u2581the", "sentencepiece", "the", False),
    ("\u0120.", "byte_bpe", ".", True),
    ("\u00e2\u0122\u00a6", "byte_bpe", "\u2026", True),  # the three bytes of "…"
    ("\u00e2\u0122", "byte_bpe", None, False),  # two of them: part of a character
    ("\u0120", "byte_bpe", "", False),
    ("\u0120the", "byte_bpe", "the", False),
    ("</s>", "byte_bpe", "</s>", False),
    ("[SEP]", "sentencepiece", "[SEP]", False),
])
def test_pieces_are_read_as_their_tokenizer_spells_them(token, kind, text, punctuation):
    assert piece_text(token, kind) == text
    assert is_punctuation(token, kind) is punctuation


def test_piece_kind_is_checked():
    with pytest.raises(ValueError, match=r"argument `kind`.*Received: kind='bpe'"):
        is_punctuation(".", "bpe")


@pytest.mark.parametrize("name", ["albert", "roberta", "xlm-roberta"])
def test_statistics_use_the_family_s_special_tokens_and_pieces(inspectors, tweets, name):  # noqa: F811
    inspector = inspectors[name]
    stats = attention_statistics(inspector)
    tokenizer = inspector.tokenizer
    assert (stats.cls_id, stats.sep_id) == (tokenizer.cls_id, tokenizer.sep_id)
    assert inspector.special_tokens == ({"cls": "<s>", "sep": "</s>"} if name in ROBERTA_PACKING else
                                        {"cls": "[CLS]", "sep": "[SEP]"})
    punctuation = {inspector.vocabulary[i] for i in stats.punctuation_ids}
    marked = "\u0120," if name == "roberta" else "\u2581,"
    expected = {token for token in (",", ".", "!", marked) if token in inspector.vocabulary}
    assert len(expected) >= 3 and expected <= punctuation
    assert not punctuation & {"\u0120", "\u2581", "</s>", "[SEP]", "<pad>", "<unk>"}

    texts = [t for t in tweets[:40] if t.strip()][:24]
    labels = np.array([i % 2 for i in range(len(texts))])
    result = probe(inspector, texts, labels, ["even", "odd"], batch_size=12)
    assert result["attention"]["special_tokens"] == inspector.special_tokens
    shares = result["attention"]["per_layer"]
    assert all(0 < value < 1 for value in shares["cls"] + shares["sep"] + shares["punctuation"])
    assert result["attention"]["num_tokens"] == sum(len(r.tokens) for r in inspector.inspect(texts, hidden_states=False))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["albert", "roberta", "xlm-roberta"])
def test_explain_writes_a_page_for_a_family_folder(families, inspectors, tmp_path, capsys, name):  # noqa: F811
    _, folder = families[name]
    out = str(tmp_path / "explained")
    status = main(["explain", "--checkpoint", folder, "--out", out, "--seq-length", str(SEQ), "Good morning, the world!",
                   "--text-pair", "see you"])
    printed = capsys.readouterr().out
    assert status == 0
    expected = inspectors[name].inspect(["Good morning, the world!"], ["see you"])[0]
    assert f"{len(expected.tokens)} tokens: {' '.join(expected.tokens)}" in printed
    assert sorted(os.listdir(out)) == [".bert_keras_output.json", "attention.html", "attention.json",
                                       "attention_layer_01.png", "attention_layer_02.png"]
    with open(os.path.join(out, "attention.json"), encoding="utf-8") as f:
        data = json.load(f)
    assert data["tokens"] == expected.tokens and data["type_ids"] == expected.type_ids
    assert np.array(data["attention"]).shape == (2, 4, len(expected.tokens), len(expected.tokens))
    with open(os.path.join(out, "attention.html"), encoding="utf-8") as f:
        page = f.read()
    assert json.dumps(expected.tokens[1], ensure_ascii=False) in page  # the pieces as spelled, inline
