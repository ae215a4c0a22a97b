"""DeBERTa-v3 through the workflows its tokenizer gates: a folder as transformers 5 saves it (a tiny seeded random
`DebertaV2*` model of DeBERTa-v3's kind and the tokenizer.json of `DebertaV2Tokenizer` converted from a SentencePiece
model trained here on tweets and texts with accents and emoji), read from raw strings. The references are the
`tokenizers` library's ids on the same file (literal special tokens read as text) and transformers' outputs on them."""

import os
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.checkpoints import load_pretrained
from bert_keras.export import export_classifier, load_classifier
from bert_keras.models import DebertaV3Encoder
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.tasks import BertClassifier, load_encoder_and_preprocessor
from tests.checkpoints._models import max_diff, perturb_torch
from tests.checkpoints.test_deberta import CONFIG
from tests.test_family_workflows import ACCENTED, mean_pool, tweets  # noqa: F401 (a fixture)
from tests.text.deberta_tokenizers import write_deberta_tokenizer
from tests.text.test_deberta_tokenizer import EDGE_CASES, reference

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

SEQ = 24
SENTIMENTS = ["negative", "neutral", "positive"]


def make_model(folder, architecture, vocab_size, labels=None, seed=0, scale=0.05):
    """A tiny seeded random transformers `architecture` of DeBERTa-v3's kind, perturbed, saved into `folder`."""
    torch.manual_seed(seed)
    config = transformers.DebertaV2Config(**dict(CONFIG, vocab_size=vocab_size),
                                          **({"id2label": dict(enumerate(labels))} if labels else {}))
    model = perturb_torch(getattr(transformers, architecture)(config), seed=seed, scale=scale)
    model.save_pretrained(str(folder))
    return model.eval()


def reference_ids(folder, texts, seq_length=SEQ):
    """`[CLS] pieces [SEP]`, cut to `seq_length` and padded with `[PAD]` (0): `(input_ids, attention_mask)`."""
    encoded = reference(folder).encode_batch(texts, add_special_tokens=False)
    rows = [[1] + e.ids[: seq_length - 2] + [2] for e in encoded]
    ids = np.array([row + [0] * (seq_length - len(row)) for row in rows])
    return ids, (np.arange(seq_length)[None, :] < np.array([[len(row)] for row in rows])).astype("int64")


def torch_run(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory, tweets):  # noqa: F811
    folder = tmp_path_factory.mktemp("deberta_tokenizer")
    return str(folder), write_deberta_tokenizer(folder, tweets[:3000] + ACCENTED * 20)


def _folder(tmp_path_factory, tokenizer_folder, architecture, labels=None, scale=0.05):
    source, vocab_size = tokenizer_folder
    folder = tmp_path_factory.mktemp(architecture)
    for file in os.listdir(source):
        os.link(os.path.join(source, file), folder / file)
    return make_model(folder, architecture, vocab_size, labels, scale=scale), str(folder)


@pytest.fixture(scope="module")
def base(tmp_path_factory, tokenizer_folder):
    """(DebertaV2Model, folder)."""
    return _folder(tmp_path_factory, tokenizer_folder, "DebertaV2Model")


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory, tokenizer_folder):
    """(DebertaV2ForSequenceClassification, folder)."""
    return _folder(tmp_path_factory, tokenizer_folder, "DebertaV2ForSequenceClassification", SENTIMENTS, scale=0.1)


@pytest.fixture(scope="module")
def texts(tweets):  # noqa: F811
    return tweets[-24:] + [text for text in EDGE_CASES if text.strip()]


def test_load_pretrained_returns_the_tokenizer_and_transformers_sequence_output(base, texts):
    model, folder = base
    pretrained = load_pretrained(folder, seq_length=SEQ)
    assert isinstance(pretrained.encoder, DebertaV3Encoder)
    assert type(pretrained.tokenizer).__name__ == "DebertaV3Tokenizer" and pretrained.seq_length == SEQ
    ids, mask = reference_ids(folder, texts)
    packed = pretrained.preprocessor(tf.constant(texts))
    np.testing.assert_array_equal(np.asarray(packed["input_word_ids"]), ids)
    np.testing.assert_array_equal(np.asarray(packed["input_mask"]), mask)
    sequence = np.asarray(pretrained.encoder(packed)["sequence_output"])
    expected = torch_run(model, ids, mask).last_hidden_state.numpy()
    real = mask.astype(bool)
    diff = max_diff(sequence[real], expected[real])
    print(f"DeBERTa-v3 sequence_output from raw strings: max abs difference {diff:.2e}")
    assert diff <= 1e-5, diff


@pytest.mark.slow  # 3 s in the full run of 450d6b9
def test_pairs_are_packed_bert_s_way(base):
    _, folder = base
    _, preprocessor = load_encoder_and_preprocessor(folder, seq_length=SEQ)
    first, second = ["good morning all 😀", "a"], ["à bientôt", "b c d"]
    packed = preprocessor([np.array(first), np.array(second)])
    pairs = reference(folder)
    pairs.enable_padding(pad_id=0, length=SEQ)
    expected = pairs.encode_batch(list(zip(first, second)))  # [CLS] A [SEP] B [SEP], B's type ids 1
    np.testing.assert_array_equal(np.asarray(packed["input_word_ids"]), [e.ids for e in expected])
    np.testing.assert_array_equal(np.asarray(packed["input_type_ids"]), [e.type_ids for e in expected])


@pytest.mark.slow  # 4 s in the full run of 450d6b9
def test_sentence_encoder_mean_pooling_matches_transformers(base, texts):
    model, folder = base
    embeddings = np.asarray(SentenceEncoder.from_checkpoint(folder, pooling="mean", max_seq_length=SEQ).encode(texts))
    ids, mask = reference_ids(folder, texts)
    expected = mean_pool(torch_run(model, ids, mask).last_hidden_state.numpy(), mask)
    diff = max_diff(embeddings, expected)
    print(f"DeBERTa-v3 SentenceEncoder (mean): max abs difference {diff:.2e}")
    assert embeddings.shape == (len(texts), CONFIG["hidden_size"]) and diff <= 1e-5, diff


def test_an_imported_classifier_answers_raw_strings_with_transformers_probabilities(classifier_folder, texts):
    model, folder = classifier_folder
    classifier = BertClassifier.from_checkpoint(folder, seq_length=SEQ, activation="softmax")
    assert classifier.label_names == SENTIMENTS
    ids, mask = reference_ids(folder, texts)
    expected = torch.softmax(torch_run(model, ids, mask).logits, -1).numpy()
    diff = max_diff(np.asarray(classifier(tf.constant(texts), training=False)), expected)
    print(f"DebertaV2ForSequenceClassification from raw strings: max abs probability difference {diff:.2e}")
    assert diff <= 1e-4, diff


@pytest.mark.slow  # 7 s in the full run of 450d6b9
def test_an_imported_classifier_s_export_serves_transformers_probabilities(classifier_folder, texts, tmp_path):
    model, folder = classifier_folder
    classifier = BertClassifier.from_checkpoint(folder, seq_length=SEQ)
    export_dir = str(tmp_path / "classifier")
    export_classifier(classifier, export_dir, label_names=classifier.label_names)
    exported = load_classifier(export_dir)
    served = np.asarray(exported.predict_proba(texts))
    ids, mask = reference_ids(folder, texts)
    expected = torch.softmax(torch_run(model, ids, mask).logits, -1).numpy()
    diff = max_diff(served, expected)
    print(f"DebertaV2ForSequenceClassification export: max abs probability difference {diff:.2e}")
    assert diff <= 1e-4, diff
    assert [p["label"] for p in exported.predict(texts)] == [SENTIMENTS[i] for i in expected.argmax(1)]


@pytest.mark.slow  # a LiteRT conversion
def test_litert_serves_the_ids_with_transformers_probabilities_and_refuses_strings_plainly(classifier_folder, texts,
                                                                                           tmp_path):
    pytest.importorskip("ai_edge_litert")
    from bert_keras.export import export_litert, load_litert

    model, folder = classifier_folder
    classifier = BertClassifier.from_checkpoint(folder, seq_length=SEQ)
    export_dir = export_classifier(classifier, str(tmp_path / "classifier"), label_names=classifier.label_names)
    lite = load_litert(export_litert(export_dir, str(tmp_path / "classifier.tflite")))
    # tensorflow-text's SentencePiece op has no LiteRT kernel: the file takes token ids, packed by the export.
    assert not lite.serves_strings
    packed = {key: np.asarray(value) for key, value in classifier.preprocessor(tf.constant(texts)).items()}
    ids, mask = reference_ids(folder, texts)
    np.testing.assert_array_equal(packed["input_word_ids"], ids)
    expected = torch.softmax(torch_run(model, ids, mask).logits, -1).numpy()
    diff = max_diff(np.asarray(lite.serve_ids(**packed)["probabilities"]), expected)
    print(f"DebertaV2ForSequenceClassification LiteRT serve_ids: max abs probability difference {diff:.2e}")
    assert diff <= 1e-4, diff
    with pytest.raises(ValueError, match="serves token ids only .its export's tokenizer is 'deberta_unigram'; raw "
                                         "strings in LiteRT need WordPiece.: serve texts with the export itself"):
        lite.predict(texts[:2])


TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _offsets_differ(text):
    """Texts where the reference's offsets are not ours: a combining mark that NFKC composes into the letter before
    (the reference spans the letter alone, ours both), a control character kept as an unknown piece (U+0085), a
    zero-width joiner (a piece of its own: the reference spans it, ours is empty), a literal "▁", a character
    that NFKC expands into several pieces ("ǅ", "½": the reference gives each piece a part of it)."""
    return "\u2581" in text or any(unicodedata.combining(c) or unicodedata.category(c) in ("Cc", "Cf")
                                   and c not in "\t\n\r" or len(unicodedata.normalize("NFKC", c)) > 1 for c in text)


@pytest.fixture(scope="module")
def tagger_folder(tmp_path_factory, tokenizer_folder):
    """(DebertaV2ForTokenClassification, folder)."""
    return _folder(tmp_path_factory, tokenizer_folder, "DebertaV2ForTokenClassification", TAGS, scale=0.3)


@pytest.fixture(scope="module")
def tagger_export(tagger_folder, tmp_path_factory):
    """(transformers' model, folder, the loaded export of its BertTokenClassifier): one export for every aggregation."""
    from bert_keras.export import export_tagger, load_tagger
    from bert_keras.tasks import BertTokenClassifier

    model, folder = tagger_folder
    tagger = BertTokenClassifier.from_checkpoint(folder, seq_length=SEQ)
    assert tagger.label_names == TAGS
    export_dir = export_tagger(tagger, str(tmp_path_factory.mktemp("deberta_tagger") / "tagger"), tag_names=TAGS)
    return model, folder, load_tagger(export_dir)


@pytest.mark.parametrize("aggregation", ["none", "simple", "first", "max", "average"])
def test_an_imported_tagger_s_export_gives_the_pipeline_s_entities(tagger_export, texts, aggregation):
    model, folder, loaded = tagger_export
    fitting = [text for text, row in zip(texts, reference(folder).encode_batch(texts, add_special_tokens=False))
               if 0 < len(row.ids) <= SEQ - 2 and "[" not in text and not _offsets_differ(text)]
    pipe = transformers.pipeline("token-classification", model=model,
                                 tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
                                 aggregation_strategy=aggregation)
    found = 0
    for text, ours in zip(fitting, loaded.predict(fitting, aggregation=aggregation)):
        theirs = pipe(text)
        assert [{k: v for k, v in e.items() if k != "score"} for e in ours] == [
            {k: (int(v) if k in ("start", "end", "index") else v) for k, v in e.items() if k != "score"}
            for e in theirs], text
        np.testing.assert_allclose([e["score"] for e in ours], [float(e["score"]) for e in theirs], rtol=1e-4)
        found += len(ours)
    assert len(fitting) >= 8 and found >= 20, (len(fitting), found)


@pytest.mark.slow  # 8 s in the full run of 450d6b9
def test_the_inspector_gives_transformers_attention_maps_and_explain_writes_a_page(base, texts, tmp_path, capsys):
    """`explain`'s attention maps on DeBERTa-v3: every layer's probabilities equal transformers' `output_attentions`."""
    import json

    from bert_keras.cli import main
    from bert_keras.inspection.inspector import Inspector

    model, folder = base
    inspector = Inspector.from_checkpoint(folder, seq_length=SEQ)
    results = inspector.inspect(texts[:3])
    ids, mask = reference_ids(folder, texts[:3])
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), output_attentions=True)
    for row, result in enumerate(results):
        n = int(mask[row].sum())
        assert [inspector.vocabulary.index(token) for token in result.tokens] == list(ids[row, :n])
        reference_maps = np.stack([layer[row, :, :n, :n].numpy() for layer in theirs.attentions])
        assert result.attention.shape == reference_maps.shape
        np.testing.assert_allclose(result.attention, reference_maps, atol=1e-5)
    out = tmp_path / "explained"
    assert main(["explain", "--checkpoint", folder, "--out", str(out), "--seq-length", str(SEQ), texts[0]]) == 0
    assert f"{len(results[0].tokens)} tokens: {' '.join(results[0].tokens)}" in capsys.readouterr().out
    with open(out / "attention.json", encoding="utf-8") as f:
        assert np.abs(np.array(json.load(f)["attention"]) - results[0].attention).max() < 1e-5
    page = (out / "attention.html").read_text(encoding="utf-8")
    assert json.dumps(results[0].tokens[1], ensure_ascii=False) in page
