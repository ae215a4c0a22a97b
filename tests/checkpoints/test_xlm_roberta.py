"""XLM-RoBERTa as a member of BERT's family: a folder as transformers 5 saves it, through the workflows.

The tokenizer is a SentencePiece Unigram model trained with the `tokenizers` library's UnigramTrainer on tweets and
on texts with accents and emoji (kept in tests/tokenizer_files/unigram/), wrapped as transformers'
`XLMRobertaTokenizerFast` (fairseq's id layout: `<s> <pad> </s> <unk>`, the pieces, `<mask>` last) and saved with
`save_pretrained` beside a tiny seeded random `XLMRoberta*` model (layer_norm_eps 1e-5 and 2 padding positions, as the
real checkpoints): tokenizer.json and tokenizer_config.json, no sentencepiece.bpe.model. The references are
transformers' tokenizer's ids on the same folder (literal special tokens read as text, `encode_special_tokens`) and
transformers' outputs on them.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.checkpoints import load_checkpoint, load_pretrained
from bert_keras.export import export_classifier, load_classifier
from bert_keras.formats import tables
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.tasks import BertClassifier, BertSpanLabeler, BertTokenClassifier, load_encoder_and_preprocessor
from bert_keras.text.folders import read_folder
from bert_keras.text.unigram_tokenizer import UnigramTokenizer
from tests.checkpoints._models import max_diff, perturb_torch
from tests.helpers import ids_per_row
from tests.test_family_workflows import ACCENTED, mean_pool, tweets, unigram_reference  # noqa: F401 (a fixture)
from tests.test_family_workflows import TOKENIZER_FILES, write_unigram_tokenizer
from tests.text.test_tokenizer_json import EDGE_CASES as TOKENIZER_EDGE_CASES

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

SEQ = 24
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=SEQ + 2, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5)
# What the tokenizer is trained on beside the tweets (accents, emoji, CJK), and whitespace of every kind, control
# characters, empty, over-long: what it is checked on.
EDGE_CASES = ACCENTED + ["", "  Héllo\t ``World''  ", "x\x01y \u200b z\u3000w", "word " * 40]
SENTIMENTS = ["negative", "neutral", "positive"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
ARCHITECTURES = {tables.CLASSIFIER: "XLMRobertaForSequenceClassification",
                 tables.TOKEN_CLASSIFIER: "XLMRobertaForTokenClassification",
                 tables.SPAN: "XLMRobertaForQuestionAnswering"}
LABELS = {tables.CLASSIFIER: SENTIMENTS, tables.TOKEN_CLASSIFIER: TAGS, tables.SPAN: ["LABEL_0", "LABEL_1"]}
TASKS = {tables.CLASSIFIER: BertClassifier, tables.TOKEN_CLASSIFIER: BertTokenClassifier, tables.SPAN: BertSpanLabeler}


def make_model(folder, architecture, vocab_size, labels=None, seed=0, scale=0.05):
    """A tiny seeded random transformers `architecture` of XLM-RoBERTa, perturbed, saved into `folder`."""
    torch.manual_seed(seed)
    config = transformers.XLMRobertaConfig(**SIZES, vocab_size=vocab_size,
                                           **({"id2label": dict(enumerate(labels))} if labels else {}))
    model = perturb_torch(getattr(transformers, architecture)(config), seed=seed, scale=scale)
    model.save_pretrained(str(folder))
    return model


def reference_ids(folder, texts, seq_length=SEQ):
    """`<s> pieces </s>`, cut to `seq_length` and padded with `<pad>` (1): `(input_ids, attention_mask)`."""
    encoded = unigram_reference(folder).encode_batch(texts, add_special_tokens=False)
    rows = [[0] + e.ids[: seq_length - 2] + [2] for e in encoded]
    ids = np.array([row + [1] * (seq_length - len(row)) for row in rows])
    return ids, (np.arange(seq_length)[None, :] < np.array([[len(row)] for row in rows])).astype("int64")


def torch_run(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory, tweets):  # noqa: F811
    folder = tmp_path_factory.mktemp("xlmr_tokenizer")
    return str(folder), write_unigram_tokenizer(folder, tweets)


@pytest.fixture(scope="module")
def base(tmp_path_factory, tokenizer_folder):
    """(XLMRobertaModel, folder)."""
    source, vocab_size = tokenizer_folder
    folder = tmp_path_factory.mktemp("xlmr_base")
    for file in os.listdir(source):
        os.link(os.path.join(source, file), folder / file)
    return make_model(folder, "XLMRobertaModel", vocab_size), str(folder)


@pytest.fixture(scope="module")
def texts(tweets):  # noqa: F811
    return tweets[-24:] + EDGE_CASES


def _differences(folder, texts):
    ours = read_folder(folder, "unigram").build()
    ids = ids_per_row(ours.tokenize(tf.constant(texts)))
    expected = [e.ids for e in unigram_reference(folder).encode_batch(texts, add_special_tokens=False)]
    return [text for text, a, b in zip(texts, ids, expected) if a != b]


def test_tokenizer_json_gives_transformers_tokenizer_s_ids(tokenizer_folder, tweets):  # noqa: F811
    folder, vocab_size = tokenizer_folder
    tokenizer = read_folder(folder, "unigram").build()
    assert isinstance(tokenizer, UnigramTokenizer) and tokenizer.vocabulary_size() == vocab_size
    # fairseq's layout, as tokenizer.json lists it; RoBERTa's packing.
    assert tokenizer.vocabulary[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and tokenizer.vocabulary[-1] == "<mask>"
    assert (tokenizer.cls_id, tokenizer.pad_id, tokenizer.sep_id, tokenizer.unknown_id, tokenizer.mask_id) == (
        0, 1, 2, 3, vocab_size - 1)
    assert tokenizer.packing == "roberta" and tokenizer.num_special_tokens(2) == 4
    assert tokenizer.tokenizer_config() == {}  # cased, accents kept: no option of ALBERT's
    # The trainer's vocabulary differs between processes (tokenizers' own hash order): one of them is kept as data for
    # the tie it exposed (`test_the_tie_of_a_vocabulary_the_trainer_gave_once`).
    assert _differences(folder, tweets[-300:] + EDGE_CASES + TOKENIZER_EDGE_CASES) == []


@pytest.mark.slow
def test_ids_equal_transformers_tokenizer_on_20000_tweets(tokenizer_folder, tweets):  # noqa: F811
    bad = _differences(tokenizer_folder[0], tweets[-20_000:])
    assert bad == [], bad[:3]


def test_offsets_hold_the_pieces_text(tokenizer_folder):
    tokenizer = read_folder(tokenizer_folder[0], "unigram").build()
    texts = ["Héllo wörld 😀", "  ça   va\ttrès bien  "]
    ids, starts, ends = tokenizer.tokenize_with_char_offsets(tf.constant(texts))
    for text, row, first, end in zip(texts, ids.to_list(), starts.to_list(), ends.to_list()):
        for piece_id, a, b in zip(sum(row, []), sum(first, []), sum(end, [])):
            piece = tokenizer.piece_text(tokenizer.vocabulary[piece_id])
            assert text[a:b] == piece, (text, piece, a, b)


def test_the_tokenizer_round_trips_through_its_config(tokenizer_folder):
    tokenizer = read_folder(tokenizer_folder[0], "unigram").build()
    config = tokenizer.get_config()
    assert "lower_case" not in config and "keep_accents" not in config
    again = UnigramTokenizer.from_config(config)
    texts = tf.constant(ACCENTED)
    assert again.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()


def test_config_is_roberta_s_with_its_padding_offset(base):
    _, folder = base
    loaded = load_checkpoint(folder)
    config = loaded.encoder.get_config()
    assert (config["position_offset"], config["max_sequence_length"], config["layer_norm_epsilon"]) == (2, SEQ, 1e-5)
    assert config["type_vocab_size"] == 1 and loaded.summary.unused == []


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_load_pretrained_and_a_classifier_give_transformers_sequence_output(base, texts):
    model, folder = base
    pretrained = load_pretrained(folder, seq_length=SEQ)
    assert type(pretrained.tokenizer).__name__ == "UnigramTokenizer"
    classifier = BertClassifier.from_checkpoint(folder, num_classes=2, seq_length=SEQ)
    ids, mask = reference_ids(folder, texts)
    for preprocessor, encoder in ((pretrained.preprocessor, pretrained.encoder),
                                  (classifier.preprocessor, classifier.encoder)):
        packed = preprocessor(tf.constant(texts))
        np.testing.assert_array_equal(np.asarray(packed["input_word_ids"]), ids)
        np.testing.assert_array_equal(np.asarray(packed["input_mask"]), mask)
        sequence = np.asarray(encoder(packed)["sequence_output"])
        expected = torch_run(model, ids, mask).last_hidden_state.numpy()
        real = mask.astype(bool)
        diff = max_diff(sequence[real], expected[real])
        print(f"XLM-R sequence_output: max abs difference {diff:.2e}")
        assert diff <= 1e-5, diff
        assert max_diff(mean_pool(sequence, mask), mean_pool(expected, mask)) <= 1e-5


def test_pairs_are_packed_roberta_s_way(base):
    _, folder = base
    _, preprocessor = load_encoder_and_preprocessor(folder, seq_length=SEQ)
    first, second = ["good morning all 😀", "a"], ["à bientôt", "b c d"]
    packed = preprocessor([np.array(first), np.array(second)])
    pairs = unigram_reference(folder)
    pairs.enable_padding(pad_id=1, length=SEQ)
    expected = [e.ids for e in pairs.encode_batch(list(zip(first, second)))]  # <s> A </s></s> B </s>
    np.testing.assert_array_equal(np.asarray(packed["input_word_ids"]), expected)
    np.testing.assert_array_equal(np.asarray(packed["input_type_ids"]), np.zeros((2, SEQ)))


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_sentence_encoder_mean_pooling_matches_transformers(base, texts):
    model, folder = base
    embeddings = np.asarray(SentenceEncoder.from_checkpoint(folder, pooling="mean", max_seq_length=SEQ).encode(texts))
    ids, mask = reference_ids(folder, texts)
    expected = mean_pool(torch_run(model, ids, mask).last_hidden_state.numpy(), mask)
    diff = max_diff(embeddings, expected)
    print(f"XLM-R SentenceEncoder (mean): max abs difference {diff:.2e}")
    assert embeddings.shape == (len(texts), 32) and diff <= 1e-5


@pytest.fixture(scope="module")
def task_folders(tmp_path_factory, tokenizer_folder):
    """head -> (transformers task model, folder)."""
    source, vocab_size = tokenizer_folder
    made = {}
    for head, architecture in ARCHITECTURES.items():
        folder = tmp_path_factory.mktemp(architecture)
        for file in os.listdir(source):
            os.link(os.path.join(source, file), folder / file)
        made[head] = (make_model(folder, architecture, vocab_size, LABELS[head], scale=0.1), str(folder))
    return made


@pytest.mark.slow  # 4 s in the full run of 450d6b9
@pytest.mark.parametrize("head", sorted(ARCHITECTURES))
def test_task_head_gives_transformers_logits(task_folders, texts, head):
    model, folder = task_folders[head]
    ids, mask = reference_ids(folder, texts)
    real = mask.astype(bool)
    expected = torch_run(model, ids, mask)
    task = TASKS[head].from_checkpoint(folder, seq_length=SEQ)
    if head == tables.SPAN:  # transformers scores every position: so does a labeler without a context segment
        labeler = BertSpanLabeler(task.encoder, context_segment_id=None)
        labeler.span_head.set_weights(task.span_head.get_weights())
        outputs = labeler({"input_word_ids": ids.astype("int32"), "input_mask": mask.astype("int32"),
                           "input_type_ids": np.zeros_like(ids, dtype="int32")})
        diff = max(max_diff(np.asarray(outputs[key])[real], getattr(expected, key).numpy()[real])
                   for key in ("start_logits", "end_logits"))
    else:
        assert task.label_names == LABELS[head]
        np.testing.assert_array_equal(np.asarray(task.preprocessor(tf.constant(texts))["input_word_ids"]), ids)
        outputs, logits = np.asarray(task(tf.constant(texts), training=False)), expected.logits.numpy()
        if head == tables.TOKEN_CLASSIFIER:
            outputs, logits = outputs[real], logits[real]
        diff = max_diff(outputs, logits)
    print(f"{ARCHITECTURES[head]}: max abs logit difference {diff:.2e}")
    assert diff <= 1e-5, diff
    loaded = load_checkpoint(folder, with_heads=[head])
    assert loaded.summary.heads == [head] and loaded.summary.unused == []


def test_another_task_s_head_is_left_unread_naming_the_family_s_classes(task_folders, caplog):
    _, folder = task_folders[tables.TOKEN_CLASSIFIER]
    with caplog.at_level("WARNING", logger="bert_keras.tasks"):
        classifier = BertClassifier.from_checkpoint(folder, num_classes=2, seq_length=SEQ)
    warnings = [r.getMessage() for r in caplog.records if r.name == "bert_keras.tasks"]
    assert len(warnings) == 1, warnings
    # Every class whose head BertClassifier reads, not the first alone (which read "not one of" one BERT class).
    assert ("holds a task head for XLMRobertaForTokenClassification (classifier.bias, classifier.weight), not one of "
            "BertForSequenceClassification, AlbertForSequenceClassification, ") in warnings[0]
    assert "RobertaForSequenceClassification, XLMRobertaForSequenceClassification" in warnings[0]
    assert classifier.num_classes == 2


def test_masked_lm_head_gives_transformers_logits(tmp_path, tokenizer_folder, texts):
    source, vocab_size = tokenizer_folder
    for file in os.listdir(source):
        os.link(os.path.join(source, file), tmp_path / file)
    model = make_model(tmp_path, "XLMRobertaForMaskedLM", vocab_size, scale=0.2)
    loaded = load_checkpoint(str(tmp_path), with_heads=["mlm"])
    assert loaded.summary.heads == ["mlm"] and loaded.summary.unused == []
    assert loaded.heads["mlm"].activation == "gelu"  # RobertaLMHead's exact GELU
    ids, mask = reference_ids(str(tmp_path), texts)
    inputs = {"input_word_ids": ids.astype("int32"), "input_mask": mask.astype("int32"),
              "input_type_ids": np.zeros_like(ids, dtype="int32")}
    logits = np.asarray(loaded.heads["mlm"](loaded.encoder(inputs)["sequence_output"]))
    real = mask.astype(bool)
    diff = max_diff(logits[real], torch_run(model, ids, mask).logits.numpy()[real])
    print(f"XLMRobertaForMaskedLM: max abs logit difference {diff:.2e}")
    assert diff <= 1e-5


@pytest.mark.slow  # 8 s in the full run of 450d6b9
def test_an_imported_classifier_s_export_serves_transformers_probabilities(task_folders, texts, tmp_path):
    model, folder = task_folders[tables.CLASSIFIER]
    classifier = BertClassifier.from_checkpoint(folder, seq_length=SEQ)
    export_dir = str(tmp_path / "classifier")
    export_classifier(classifier, export_dir, label_names=classifier.label_names)
    exported = load_classifier(export_dir)
    served = np.asarray(exported.predict_proba(texts))
    predictions = exported.predict(texts)
    ids, mask = reference_ids(folder, texts)
    expected = torch.softmax(torch_run(model, ids, mask).logits, -1).numpy()
    diff = max_diff(served, expected)
    print(f"XLMRobertaForSequenceClassification export: max abs probability difference {diff:.2e}")
    assert diff <= 1e-4, diff
    # An empty text gets no label (the export's answer for no text); every other one transformers' most probable.
    assert [p["label"] for p in predictions] == [SENTIMENTS[i] if text else None
                                                 for text, i in zip(texts, expected.argmax(1))]


@pytest.mark.slow  # a LiteRT conversion
def test_litert_serves_the_ids_with_transformers_probabilities_and_refuses_strings_plainly(task_folders, texts,
                                                                                           tmp_path):
    pytest.importorskip("ai_edge_litert")
    from bert_keras.export import export_litert, load_litert

    model, folder = task_folders[tables.CLASSIFIER]
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
    print(f"XLMRobertaForSequenceClassification LiteRT serve_ids: max abs probability difference {diff:.2e}")
    assert diff <= 1e-4, diff
    with pytest.raises(ValueError, match="serves token ids only .its export's tokenizer is 'unigram'; raw strings "
                                         "in LiteRT need WordPiece.: serve texts with the export itself"):
        lite.predict(texts[:2])


# A vocabulary the trainer gave once (tests/checkpoints/xlm_roberta_data/): transformers' tokenizer cuts "��_����"
# after an unknown character as "��_" "�" "���", one unit in the last place above "���" "�", which the in-graph search
# kept while its unknown piece's score was rounded to float32 (NumPy's promotion of the penalty).
TIE_DATA = os.path.join(os.path.dirname(__file__), "xlm_roberta_data")
TIE_WORD = "_\ufffd\ufffd\ufffd\ufffd_\ufffd\U000fb30d\ufffd\ufffd\ufffd_\ufffd\ufffd_\ufffd\ufffd\ufffd\ufffd_\ufffd"


def test_the_tie_of_a_vocabulary_the_trainer_gave_once():
    ours = read_folder(TIE_DATA, "unigram").build()
    ids = sum(ours.tokenize(tf.constant([TIE_WORD])).to_list()[0], [])
    assert ids == unigram_reference(TIE_DATA).encode(TIE_WORD, add_special_tokens=False).ids


# The kept vocabulary (tests/tokenizer_files/unigram/) cuts "▁Ս����_" as "▁" "Ս" "�" "���" "_" in transformers and
# as "▁" "Ս" "���" "�" "_" in the `tokenizers` library reading the file itself: equal paths whose sums part in the
# last bit, where serde_json took one of the scores one unit in the last place off (20 of 20,004 texts part so).
ULP_TEXT = "Just saw a google car \u054d\ufffd\ufffd\ufffd\ufffd_"


def test_ties_break_on_the_scores_transformers_reads():
    folder = str(TOKENIZER_FILES / "unigram")
    ours = ids_per_row(read_folder(folder, "unigram").build().tokenize(tf.constant([ULP_TEXT])))[0]
    theirs = unigram_reference(folder).encode(ULP_TEXT, add_special_tokens=False)
    assert ours == theirs.ids and theirs.tokens[-4:] == ["\u054d", "\ufffd", "\ufffd\ufffd\ufffd", "_"]
    from_file = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    assert from_file.encode(ULP_TEXT, add_special_tokens=False).tokens[-4:] == [
        "\u054d", "\ufffd\ufffd\ufffd", "\ufffd", "_"]
