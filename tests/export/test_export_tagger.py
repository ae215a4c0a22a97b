"""The tagger export on an imported transformers BertForTokenClassification: the pipeline's entities, offsets, windows.

The reference is transformers' token-classification pipeline on the same folder (BertTokenizerFast with
`model_max_length=SEQ_LENGTH`, so that it cuts an over-long text into the same windows with `stride=STRIDE`).
"""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.export import export_classifier, export_tagger, load_tagger
from bert_keras.export.entity_groups import text_entities, tokens_to_string
from bert_keras.export.manifest import read_manifest
from tests.helpers import as_written_before_the_manifest
from bert_keras.export.warmup import WARMUP_FILE, read_warmup_requests
from bert_keras.tasks import BertClassifier, BertTokenClassifier

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
WORDS = ["new", "york", "##er", "paris", "is", "nice", "cafe", "love", "the", "city", "ada", "##lace", "!",
         ",", ".", "@", "#", "東", "京", "berlin", "and"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + LETTERS + [f"##{c}" for c in LETTERS]
SEQ_LENGTH, STRIDE = 16, 4
LONG = ("Ada Lovelace and I love the city of lights , Paris ! New Yorkers love Berlin and Zürich too , "
        "the café is nice @ada #paris ! " * 2).strip()
TEXTS = [
    "Ada Lovelace loves Paris!",
    "Café in Zürich 😀 with @New_Yorker #berlin",
    "東京都 is nice, 東京 !",
    "",
    "   ",
    "new\t\t york  \n\n   PARIS   cafe",
    "Ｆｕｌｌ width and e\u0301 combining, ﬁ ligature",
    LONG,
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A BertForTokenClassification with 7 tags (3 types), its vocab and tokenizer files, saved by transformers."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tests.checkpoints._models import perturb_torch

    directory = str(tmp_path_factory.mktemp("ner_checkpoint"))
    config = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32, id2label=dict(enumerate(TAGS)))
    # The initial weights are seeded too: torch seeds its generator at random in each process, and an unseeded
    # draw left the full-width word's [UNK] untagged in some processes and tagged in others.
    torch.manual_seed(11)
    model = perturb_torch(transformers.BertForTokenClassification(config), seed=11)
    # Decisive, varied tags (entities of every type, every unknown piece of TEXTS tagged), not saturated: at x20 the
    # smallest gap between the two best tags of a piece of TEXTS' windows is 0.035 in transformers' logits.
    with torch.no_grad():
        model.classifier.weight.mul_(20.0)
        model.classifier.bias.copy_(torch.tensor([2.5, 0.0, 0.5, 0.0, 0.5, 0.0, 0.5]))
    model.save_pretrained(directory)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    transformers.BertTokenizerFast(os.path.join(directory, "vocab.txt"), do_lower_case=True,
                                   model_max_length=SEQ_LENGTH).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def exported(folder, tmp_path_factory):
    tagger = BertTokenClassifier.from_checkpoint(folder, seq_length=SEQ_LENGTH)
    export_dir = export_tagger(tagger, str(tmp_path_factory.mktemp("exports") / "tagger"), stride=STRIDE, xla=True)
    return tagger, export_dir, load_tagger(export_dir, warm_up=True)


def _pipeline(folder, aggregation, stride=STRIDE):
    import transformers

    kwargs = {} if aggregation == "none" else {"stride": stride}
    return transformers.pipeline("token-classification", model=folder, aggregation_strategy=aggregation, **kwargs)


def _assert_same_entities(ours, theirs, text):
    assert [{k: v for k, v in e.items() if k != "score"} for e in ours] == \
        [{k: (int(v) if k in ("start", "end", "index") else v) for k, v in e.items() if k != "score"} for e in theirs], text
    np.testing.assert_allclose([e["score"] for e in ours], [float(e["score"]) for e in theirs], rtol=1e-4, err_msg=text)


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", ["simple", "first", "max", "average"])
def test_entities_equal_transformers_pipeline(folder, exported, aggregation):
    _, _, loaded = exported
    ours = loaded.predict(TEXTS, aggregation=aggregation)
    pipe = _pipeline(folder, aggregation)
    for text, mine in zip(TEXTS, ours):
        _assert_same_entities(mine, pipe(text) if text else [], text)  # the pipeline refuses ""
    assert sum(len(e) for e in ours) >= 20 and {e["entity_group"] for t in ours for e in t} == {"PER", "LOC", "ORG"}
    assert ours[3] == ours[4] == []  # empty, blank
    assert len(ours[-1]) >= 10 and ours[-1][-1]["end"] > len(LONG) - 10  # the over-long text's end is tagged too
    for text, entities in zip(TEXTS, ours):
        assert all(0 <= e["start"] < e["end"] <= len(text) for e in entities)
        # The span's characters are the word's, but for case, accents, the spaces between words and "##".
        for entity in entities:
            span = text[entity["start"]:entity["end"]].lower().replace("\u0301", "")
            assert "".join(span.translate(str.maketrans("éü", "eu")).split()) == \
                "".join(entity["word"].lower().replace("##", "").split()), (text, entity)


@pytest.mark.slow
def test_pieces_without_aggregation_equal_transformers_pipeline(folder, exported):
    _, _, loaded = exported
    ours = loaded.predict(TEXTS, aggregation="none")
    pipe = _pipeline(folder, "none")
    window = SEQ_LENGTH - 2
    fits = [int(pieces["window"].max(initial=0)) == 0 for pieces in loaded.tag_pieces(TEXTS)]
    assert fits == [True, False, True, True, True, True, False, False]
    for text, mine, whole in zip(TEXTS, ours, fits):
        if whole:
            _assert_same_entities(mine, pipe(text) if text else [], text)
        else:  # the pipeline truncates to the first window; ours has every piece once, numbered on
            _assert_same_entities([e for e in mine if e["index"] <= window - STRIDE],
                                  [e for e in pipe(text) if e["index"] <= window - STRIDE], text)
    pieces = loaded.tag_pieces([LONG])[0]
    assert int(pieces["primary"].sum()) == len(set(pieces["piece_index"].tolist())) > 3 * window
    assert max(e["index"] for e in ours[-1]) > 2 * window
    # An unknown piece's word is the raw text it spans (the pipeline's rule), not "[UNK]".
    unknown = {e["word"]: (text, e) for text, entities in zip(TEXTS, ours) for e in entities if not e["word"].isascii()}
    assert {"都", "Ｆｕｌｌ", "ﬁ"} <= set(unknown)
    assert all(text[e["start"]:e["end"]] == word for word, (text, e) in unknown.items())


@pytest.mark.slow
def test_saved_model_signature_serves_raw_strings(exported):
    import tensorflow_text  # noqa: F401 - registers the tokenizer's ops, as plain tf.saved_model.load needs

    tagger, export_dir, loaded = exported
    signature = tf.saved_model.load(export_dir).signatures["serving_default"]
    outputs = signature(text=tf.constant(TEXTS))
    pieces = loaded.tag_pieces(TEXTS)
    lengths = outputs["lengths"].numpy()
    assert outputs["tag_ids"].dtype == tf.int32 and outputs["char_starts"].dtype == tf.int64
    assert outputs["scores"].shape[-1] == len(TAGS)
    for row, (text, piece) in enumerate(zip(TEXTS, pieces)):
        n = lengths[row]
        np.testing.assert_array_equal(outputs["tag_ids"].numpy()[row, :n], piece["tag_ids"])
        np.testing.assert_array_equal(outputs["char_starts"].numpy()[row, :n], piece["char_starts"])
        np.testing.assert_array_equal(outputs["char_ends"].numpy()[row, n:], -1)  # padding
        np.testing.assert_allclose(outputs["scores"].numpy()[row, :n].sum(-1), 1.0, rtol=1e-5)
    # A text that fits: the model's own logits at its pieces (after [CLS]), the tags their argmax.
    fitting = [0, 2, 5]
    logits = np.asarray(tagger(tf.constant([TEXTS[row] for row in fitting]), training=False))
    for position, row in enumerate(fitting):
        n = lengths[row]
        expected = tf.nn.softmax(logits[position, 1 : n + 1]).numpy()
        np.testing.assert_allclose(outputs["scores"].numpy()[row, :n], expected, atol=1e-5)
        np.testing.assert_array_equal(outputs["tag_ids"].numpy()[row, :n], expected.argmax(-1))
    assert lengths[3] == lengths[4] == 0 and lengths[5] == 4  # empty, blank; the whitespace runs' four words
    assert [TEXTS[5][s:e] for s, e in zip(pieces[5]["char_starts"], pieces[5]["char_ends"])] == \
        ["new", "york", "PARIS", "cafe"]
    assert pieces[5]["tokens"] == ["new", "york", "paris", "cafe"] and pieces[5]["token_ids"].tolist() == \
        [VOCAB.index(t) for t in pieces[5]["tokens"]]


@pytest.mark.slow
def test_the_loader_leaves_the_token_id_endpoints_unloaded_and_answers_bit_for_bit_alike(exported):
    import tensorflow_text  # noqa: F401 - registers the tokenizer's ops, as plain tf.saved_model.load needs

    _, export_dir, _ = exported
    whole = tf.saved_model.load(export_dir)
    loaded = load_tagger(export_dir, warm_up=False)
    assert {"serve_ids", "serve_ids_padded"} <= set(whole.signatures) and hasattr(whole, "serve_ids")
    assert sorted(set(whole.signatures) - set(loaded._saved.signatures)) == ["serve_ids", "serve_ids_padded"]
    assert not hasattr(loaded._saved, "serve_ids") and loaded.tag_names == TAGS
    outputs = whole.signatures["serving_default"](text=tf.constant(TEXTS))
    for row, piece in enumerate(loaded.tag_pieces(TEXTS)):
        n = outputs["lengths"].numpy()[row]
        np.testing.assert_array_equal(piece["scores"], outputs["scores"].numpy()[row, :n])


@pytest.mark.slow
def test_the_outputs_are_cut_into_rows_without_assertions(exported):
    """The pieces' rows are built unchecked (sorted by construction): each checked row split added 8 conditionals,
    64 of the 156 functions a MiniLM tagger's load made into graphs; merging the words' pieces added 9 more."""
    from tensorflow.core.protobuf import saved_model_pb2

    _, export_dir, _ = exported
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as file:
        proto.ParseFromString(file.read())
    functions = proto.meta_graphs[0].graph_def.library.function
    names = [function.signature.name for function in functions]
    assert any("while_body" in name for name in names)  # the windows' loop: the names are TensorFlow's
    assert not [name for name in names if "RaggedFromValueRowIds" in name]
    # Nor the pieces of the words merged with checks (`merge_dims`): what is left is inside tensorflow-text's ops.
    checks = [node.name for function in functions for node in function.node_def
              if node.op in ("If", "StatelessIf") and node.name.startswith(("RaggedFromRowSplits", "RaggedFromValue"))]
    assert not checks, checks


@pytest.mark.slow
def test_windows_cover_an_over_long_text(exported):
    _, _, loaded = exported
    pieces = loaded.tag_pieces([LONG, "paris"])
    long, short = pieces
    window = SEQ_LENGTH - 2
    count = len(set(long["piece_index"].tolist()))
    # Windows of 14 pieces every 10 (stride 4), the last reaching the end, as the tokenizer's overflow cuts them.
    expected_windows = 1 + -(-(count - window) // (window - STRIDE))
    assert long["window"].max() + 1 == expected_windows
    for w in range(expected_windows):
        indices = long["piece_index"][long["window"] == w]
        assert indices.tolist() == list(range(w * (window - STRIDE), min(w * (window - STRIDE) + window, count)))
    assert np.all(short["window"] == 0) and short["primary"].all() and short["tokens"] == ["paris"]
    # Each piece is primary once: in the overlap of windows 0 and 1 (pieces 10-13), 10 and 11 in window 0.
    primary = {int(i): int(w) for i, w, p in zip(long["piece_index"], long["window"], long["primary"]) if p}
    assert len(primary) == count and [primary[i] for i in range(9, 15)] == [0, 0, 0, 1, 1, 1]
    # A text's copies are chosen as if it were alone: the texts before it in the batch do not move them.
    after = loaded.tag_pieces(["paris " * 7, LONG])[1]
    np.testing.assert_array_equal(after["primary"], long["primary"])


@pytest.mark.slow
def test_warm_up_file_replays(exported):
    _, export_dir, loaded = exported
    requests = read_warmup_requests(os.path.join(export_dir, "assets.extra", WARMUP_FILE))
    texts = [request["text"] for request in requests]
    assert len(requests) == 2 + 1 + 1  # 8 and 16 tokens (the packed length), a batch, a text of three windows
    assert len(texts[-1][0].split()) == 2 * SEQ_LENGTH
    assert loaded.warm_up_seconds > 0
    metadata = read_manifest(export_dir)
    assert metadata["tag_names"] == TAGS and metadata["stride"] == STRIDE and metadata["kind"] == "tagger"
    assert load_tagger(export_dir, warm_up=False).warm_up_seconds == 0.0


@pytest.mark.slow
def test_predict_inputs_and_errors(exported, tmp_path):
    _, export_dir, loaded = exported
    single = loaded.predict(TEXTS[0])
    assert single == loaded.predict([TEXTS[0]])[0] == loaded.predict(np.array([TEXTS[0]]))[0]
    # One text at a time (the XLA path) and both together (op by op): the same entities, scores up to rounding.
    for one, both, text in zip(loaded.predict(np.array(TEXTS[:2], dtype=object), batch_size=1),
                               loaded.predict(TEXTS[:2]), TEXTS):
        _assert_same_entities(one, both, text)
    assert loaded.predict([]) == []
    with pytest.raises(ValueError, match=r"`aggregation`, expected one of 'simple', 'first', 'max', 'average', "
                       r"'none'\. Received: aggregation='longest'"):
        loaded.predict("paris", aggregation="longest")
    with pytest.raises(TypeError, match=r"`texts` to hold strings\. Received an item of type bytes"):
        loaded.predict([b"paris"])
    with pytest.raises(ValueError, match="batch_size"):
        loaded.predict("paris", batch_size=0)


@pytest.mark.slow
def test_export_errors_and_a_classifier_export_refused(folder, exported, tmp_path):
    tagger, _, _ = exported
    with pytest.raises(ValueError, match=r"`stride`, expected fewer pieces than a window holds \(14"):
        export_tagger(tagger, str(tmp_path / "x"), stride=14)
    with pytest.raises(ValueError, match=r"`tag_names`, expected 7 distinct names"):
        export_tagger(tagger, str(tmp_path / "x"), tag_names=["O", "B-PER"])
    assert not os.path.exists(tmp_path / "x")
    classifier = BertClassifier.from_checkpoint(folder, seq_length=SEQ_LENGTH, num_classes=2, label_names=["a", "b"])
    with pytest.raises(ValueError, match=r"export_tagger exports a BertTokenClassifier"):
        export_tagger(classifier, str(tmp_path / "x"))
    export_dir = export_classifier(classifier, str(tmp_path / "classifier"))
    with pytest.raises(ValueError, match=r"is a classifier export, not a tagger one. Serve it with "
                       r"bert_keras.export.load_classifier\(.*\).predict\(texts\), or on the command line: "
                       r"bert-keras predict --model .*classifier \"a text\"\."):
        load_tagger(export_dir)


def test_word_pieces_join_as_the_wordpiece_decoder():
    transformers = pytest.importorskip("transformers")
    from tokenizers import decoders

    decoder = decoders.WordPiece(prefix="##", cleanup=True)
    for tokens in (["new", "york", "##er", ",", "hi", "."], ["##er", "'", "s", "do", "not", "?"], ["[UNK]", "😀"]):
        assert tokens_to_string(tokens) == decoder.decode(tokens)
    assert transformers  # the reference decoder is the one BertTokenizerFast uses


def test_overlapping_window_entities_keep_the_longer():
    scores = np.eye(3, dtype="float32")[[1, 2, 1, 2]]  # B-X I-X | B-X I-X over two windows sharing piece 1
    pieces = {"scores": scores, "char_starts": np.array([0, 4, 4, 8]), "char_ends": np.array([3, 7, 7, 11]),
              "tokens": ["aaa", "bbb", "bbb", "ccc"], "window": np.array([0, 0, 1, 1]),
              "piece_index": np.array([0, 1, 1, 2]), "primary": np.array([True, True, False, True])}
    entities = text_entities("aaa bbb ccc", pieces, ["O", "B-X", "I-X"])
    assert [(e["start"], e["end"], e["word"]) for e in entities] == [(0, 7, "aaa bbb")]
    none = text_entities("aaa bbb ccc", pieces, ["O", "B-X", "I-X"], aggregation="none")
    assert [(e["index"], e["entity"]) for e in none] == [(1, "B-X"), (2, "I-X"), (3, "I-X")]




def test_a_word_cut_into_pieces_is_one_entity_with_the_strategy_taggers_are_trained_for():
    # issue 50, item 2: with "simple", a word whose pieces take other tags came back as fragments ("bi", "##eber").
    scores = np.eye(5, dtype="float32")[[1, 3, 0]]  # "bi" B-PER, "##eber" B-ORG, "sings" O
    pieces = {"scores": scores, "char_starts": np.array([0, 2, 7]), "char_ends": np.array([2, 6, 12]),
              "tokens": ["bi", "##eber", "sings"], "window": np.zeros(3, int), "piece_index": np.arange(3),
              "primary": np.ones(3, bool)}
    tags = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG"]
    simple = text_entities("Bieber sings", pieces, tags, aggregation="simple")
    assert [(e["entity_group"], e["word"]) for e in simple] == [("PER", "bi"), ("ORG", "##eber")]
    first = text_entities("Bieber sings", pieces, tags, aggregation="first")
    assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in first] == [("PER", "bieber", 0, 6)]


@pytest.mark.slow
def test_the_export_records_its_default_aggregation(exported, tmp_path):
    _, export_dir, loaded = exported
    assert read_manifest(export_dir)["aggregation"] == "first" and loaded.aggregation == "first"
    assert loaded.predict(TEXTS) == loaded.predict(TEXTS, aggregation="first")
    older = shutil.copytree(export_dir, tmp_path / "older")
    as_written_before_the_manifest(str(older))  # an export written before: it served "simple"
    assert load_tagger(str(older), warm_up=False).aggregation == "simple"


def test_a_window_longer_than_the_encoders_positions_is_refused_at_export(tmp_path):
    # Issue 55 item 10, the tagger's side: a preprocessor longer than the encoder's positions exported, then every
    # text of more pieces than the positions failed at predict.
    from bert_keras import BertEncoder
    from bert_keras.text import BertPreprocessor

    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=40)
    tagger = BertTokenClassifier(encoder, num_classes=3, preprocessor=BertPreprocessor(VOCAB, seq_length=64))
    with pytest.raises(ValueError, match=r"`model`.*max_sequence_length=40.*Received: seq_length=64"):
        export_tagger(tagger, str(tmp_path / "out"), tag_names=["O", "B-X", "I-X"])
    assert not os.path.exists(tmp_path / "out")
