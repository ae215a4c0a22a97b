"""The token-level tasks on BERT's family: taggers and readers of ALBERT, RoBERTa, XLM-RoBERTa, ELECTRA and DistilBERT.

Each family's folder is a tiny random transformers model with a task head and its tokenizer's files, the tokenizer
trained here on tweets (tests/test_family_workflows.py's writers): SentencePiece for ALBERT, byte-level BPE for
RoBERTa, WordPiece for ELECTRA and DistilBERT. The head's weights are copied into ours (transformers' family task
heads are not read by `from_checkpoint`), so that the export and transformers score the same model.

References: for RoBERTa, ELECTRA and DistilBERT, transformers' token-classification pipeline on the same folder (for
RoBERTa its fallback word heuristic: the byte-level BPE model has no continuing-subword prefix) and transformers 4's
question-answering decoding (`tests.test_export_reader.reference_answers`, its windows from the fast tokenizer).
ALBERT's `spiece.model` cannot be read by transformers 5 here, so for ALBERT the references are our own invariants:
offsets into the raw text, whole words, the windows of `sentencepiece`'s ids, the Keras model's own predictions.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.export import export_reader, export_tagger, load_reader, load_tagger
from bert_keras.export.manifest import read_manifest
from bert_keras.export.entity_groups import text_entities, tokens_to_string
from bert_keras.tasks import BertSpanLabeler, BertTokenClassifier
from bert_keras.text.alignment import join_words
from bert_keras.text.windows import qa_windows, tagging_windows
from tests.checkpoints._models import perturb_torch
from tests.helpers import as_written_before_the_manifest
from tests.export.test_export_reader import reference_answers
from tests.test_family_workflows import FAMILIES, WRITERS, tweets  # noqa: F401 (a fixture)
from tests.text.test_sentencepiece import albert_reference_text

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
spm = pytest.importorskip("sentencepiece")

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
TAGGER_SEQ, TAGGER_STRIDE = 24, 4
READER_SEQ, READER_STRIDE, QUESTION_LENGTH = 40, 8, 20
AGGREGATIONS = ("simple", "first", "max", "average")
MADE_TEXTS = ["Ada Lovelace loves Paris!", "  New   York,Paris! 😀 naïve café", "x\ty\nz", "", "   ",
              "new york and paris and berlin and rome and ada and alan and grace and new york again"]
KINDS = {"albert": "sentencepiece", "roberta": "byte_bpe", "electra": "wordpiece", "distilbert": "wordpiece",
         "xlm-roberta": "unigram"}
# The families packed RoBERTa's way (`<s> A </s></s> B </s>`, no segments), their positions after the padding index.
ROBERTA_PACKING = ("roberta", "xlm-roberta")


_TOKENIZERS = {}  # kind -> (the folder its tokenizer was trained into, the files the writer wrote, vocabulary size)


def _write_tokenizer(kind, folder, tweets):
    """`WRITERS[kind]` into the empty `folder`, trained once per kind in this process and copied after that: a
    family's tagger and reader folders hold the same tokenizer, trained on the same tweets (seconds each time)."""
    if kind not in _TOKENIZERS:
        size = WRITERS[kind](folder, tweets)
        _TOKENIZERS[kind] = (folder, sorted(os.listdir(folder)), size)
        return size
    source, files, size = _TOKENIZERS[kind]
    for file in files:
        shutil.copyfile(source / file, folder / file)
    return size


def _family_folder(name, folder, tweets, head, seq_length, **config):
    """A folder of family `name` holding `<Family>For<head>` (tiny, random, peaked head) and its tokenizer's files."""
    config_class, model_class, sizes, kind, _ = FAMILIES[name]
    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = _write_tokenizer(kind, folder, tweets)
    sizes = dict(sizes, max_position_embeddings=seq_length + (2 if name in ROBERTA_PACKING else 0))
    torch.manual_seed(0)
    model_class = getattr(transformers, model_class.replace("Model", f"For{head}"))
    model = perturb_torch(model_class(getattr(transformers, config_class)(**sizes, vocab_size=vocab_size, **config)),
                          seed=7, scale=0.2 if head == "QuestionAnswering" else 0.02)
    # Decisive scores, not saturated: the smallest gap between a piece's two best tags, and between the best tags of
    # a word's two best pieces (aggregation "max"), is 7.8e-5 on the tests' texts at x20 (1.5e-8 at x60: probabilities
    # within 1e-7 of 1 tie in float32, and TensorFlow's and torch's rounding chose between them; tagger entities
    # flipped once in CI).
    with torch.no_grad():
        if head == "TokenClassification":
            model.classifier.weight.mul_(20.0)
            model.classifier.bias.copy_(torch.tensor([2.5, 0.0, 0.5, 0.0, 0.5, 0.0, 0.5]))
        else:
            model.qa_outputs.weight.mul_(40.0)
    model.eval()
    model.save_pretrained(str(folder))
    return model


def _linear(torch_layer):
    return [torch_layer.weight.detach().numpy().T, torch_layer.bias.detach().numpy()]


def _reference_tokenizer(name, folder, seq_length):
    if name == "xlm-roberta":
        return transformers.XLMRobertaTokenizerFast.from_pretrained(folder, model_max_length=seq_length)
    if name == "roberta":
        return transformers.RobertaTokenizerFast.from_pretrained(folder, model_max_length=seq_length)
    return transformers.BertTokenizerFast(os.path.join(folder, "vocab.txt"), do_lower_case=True,
                                          model_max_length=seq_length)


@pytest.fixture(scope="module")
def texts(tweets):  # noqa: F811 (the fixture imported above)
    return tweets[-40:] + MADE_TEXTS


@pytest.fixture(scope="module")
def taggers(tmp_path_factory, tweets):  # noqa: F811
    """name -> (transformers model, folder, our tagger, export directory, loaded export), built once per name."""
    built = {}

    def build(name):
        if name not in built:
            folder = tmp_path_factory.mktemp(f"{name}_ner")
            model = _family_folder(name, folder, tweets, "TokenClassification", TAGGER_SEQ,
                                   id2label=dict(enumerate(TAGS)))
            tagger = BertTokenClassifier.from_checkpoint(str(folder), seq_length=TAGGER_SEQ, num_classes=len(TAGS),
                                                         label_names=TAGS)
            tagger.classifier_head.set_weights(_linear(model.classifier))
            export_dir = export_tagger(tagger, str(tmp_path_factory.mktemp("exports") / name), stride=TAGGER_STRIDE)
            built[name] = (model, str(folder), tagger, export_dir, load_tagger(export_dir, warm_up=False))
        return built[name]

    return build


@pytest.fixture(scope="module")
def readers(tmp_path_factory, tweets):  # noqa: F811
    """name -> (transformers model, folder, our span labeler, loaded export), built once per name."""
    built = {}

    def build(name):
        if name not in built:
            folder = tmp_path_factory.mktemp(f"{name}_qa")
            model = _family_folder(name, folder, tweets, "QuestionAnswering", READER_SEQ)
            # RoBERTa's packing has no segments: its labeler scores every position (context_segment_id None, whatever
            # is asked), the export masks by its windows.
            labeler = BertSpanLabeler.from_checkpoint(str(folder), seq_length=READER_SEQ)
            assert (labeler.context_segment_id is None) == (name in ROBERTA_PACKING)
            labeler.span_head.set_weights(_linear(model.qa_outputs))
            export_dir = export_reader(labeler, str(tmp_path_factory.mktemp("exports") / name), seq_length=READER_SEQ,
                                       doc_stride=READER_STRIDE, max_question_length=QUESTION_LENGTH)
            built[name] = (model, str(folder), labeler, load_reader(export_dir, warm_up=False))
        return built[name]

    return build


def _assert_same_entities(ours, theirs, text):
    assert [{k: v for k, v in e.items() if k != "score"} for e in ours] == \
        [{k: (int(v) if k in ("start", "end", "index") else v) for k, v in e.items() if k != "score"} for e in theirs], text
    np.testing.assert_allclose([e["score"] for e in ours], [float(e["score"]) for e in theirs], rtol=1e-4, err_msg=text)


def _plain(text):
    """ASCII without ALBERT's quote pairs: a piece's characters are the text's (but for case)."""
    return text.isascii() and "``" not in text and "''" not in text


def _assert_whole_words(text, entities, pieces):
    """Entities are whole words: runs of pieces with no space (U+0020) at or just before a piece's start.

    The pipeline's words for a tokenizer without "##"; `pieces` are the export's, of a text of one window.
    """
    starts, ends = pieces["char_starts"].tolist(), pieces["char_ends"].tolist()
    begins = [i == 0 or s == 0 or " " in text[s - 1 : s + 1] for i, s in enumerate(starts)]
    word_starts = {s for s, begin in zip(starts, begins) if begin}
    word_ends = {e for e, following in zip(ends, begins[1:] + [True]) if following}
    for entity in entities:
        assert entity["start"] in word_starts and entity["end"] in word_ends, (text, entity, starts, ends)


def _softmax(logits):
    logits = np.asarray(logits, "float64")
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------
# The tagger
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", [pytest.param("albert", marks=pytest.mark.slow), "roberta", "xlm-roberta"])
def test_tagger_export_of_the_family_serves_raw_strings_with_offsets(taggers, texts, name):
    _, _, tagger, export_dir, loaded = taggers(name)
    metadata = read_manifest(export_dir)
    assert metadata["tokenizer"]["kind"] == KINDS[name] and "suffix_indicator" not in metadata["tokenizer"]
    assert loaded.tokenizer_kind == KINDS[name]
    tokenizer = tagger.preprocessor.tokenizer
    rows = loaded.tag_pieces(texts)
    fits = [len(row["window"]) == 0 or row["window"].max() == 0 for row in rows]
    assert sum(fits) >= 6 and not all(fits)  # short texts and texts of several windows
    short = [text for text, fit in zip(texts, fits) if fit]
    probabilities = _softmax(tagger.predict(np.array(short), verbose=0))  # (texts, seq, tags)
    pieces = [x.merge_dims(1, 2).to_list() for x in tokenizer.tokenize_with_char_offsets(short)]
    for i, (text, row) in enumerate(zip(short, (row for row, fit in zip(rows, fits) if fit))):
        ids, starts, ends = (np.array(x[i], "int64") for x in pieces)
        # The export's offsets are the tokenizer's, in the raw text; its scores the Keras model's.
        np.testing.assert_array_equal(row["token_ids"], ids)
        np.testing.assert_array_equal(row["char_starts"], starts)
        np.testing.assert_array_equal(row["char_ends"], ends)
        assert all(0 <= s <= e <= len(text) for s, e in zip(starts, ends))
        np.testing.assert_allclose(row["scores"], probabilities[i, 1 : len(ids) + 1], atol=1e-5)
    # A piece's span holds its characters (ASCII texts; ALBERT lower-cases).
    for text, row in zip(texts, rows):
        if _plain(text):
            for token, s, e in zip(row["tokens"], row["char_starts"], row["char_ends"]):
                if token != tokenizer.unknown_token:
                    expected = tokens_to_string([token], tokenizer=KINDS[name]).strip(" ")
                    assert (text[s:e].lower() if name == "albert" else text[s:e]) == expected, (text, token)
    entities = loaded.predict(texts, aggregation="first")
    assert sum(len(e) for e in entities) >= 20 and entities[texts.index("")] == []
    for text, found, row, fit in zip(texts, entities, rows, fits):
        assert all(0 <= e["start"] <= e["end"] <= len(text) for e in found)
        # An unknown piece begins a word wherever it is, and so does a window (the pipeline's windows too).
        if fit and tokenizer.unknown_token not in row["tokens"]:
            _assert_whole_words(text, found, row)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["roberta", "electra", "distilbert"])
def test_tagger_entities_equal_transformers_pipeline(taggers, texts, name):
    model, folder, _, _, loaded = taggers(name)
    tokenizer = _reference_tokenizer(name, folder, TAGGER_SEQ)
    fits = [len(row["window"]) == 0 or row["window"].max() == 0 for row in loaded.tag_pieces(texts)]
    counts = {}
    for aggregation in AGGREGATIONS + ("none",):
        kwargs = {} if aggregation == "none" else {"stride": TAGGER_STRIDE}
        pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer,
                                     aggregation_strategy=aggregation, **kwargs)
        ours = loaded.predict(texts, aggregation=aggregation)
        compared = 0
        for text, mine, fit in zip(texts, ours, fits):
            if aggregation == "none" and not fit:  # the pipeline reads only the first window without a stride
                continue
            _assert_same_entities(mine, pipe(text) if text else [], text)  # the pipeline refuses ""
            compared += len(mine)
        counts[aggregation] = compared
    assert min(counts.values()) >= 30, counts
    assert not all(fits)


def _albert_reference_tokenizer(folder, seq_length):
    """transformers' AlbertTokenizer on the folder's spiece.model, read without the `sentencepiece` protobuf module.

    transformers 5 reads a `spiece.model` through that module, which needs a newer protobuf than TensorFlow allows
    here; its pieces, scores and normalisation table (`precompiled_charsmap`) are read from the wire format instead.
    """
    from bert_keras.text.unigram import _typed_fields, read_pieces

    with open(os.path.join(folder, "spiece.model"), "rb") as f:
        proto = f.read()
    normalizer = next(value for number, _, value in _typed_fields(proto) if number == 3)  # ModelProto.normalizer_spec
    charsmap = next(value for number, _, value in _typed_fields(normalizer) if number == 2)  # .precompiled_charsmap
    return transformers.AlbertTokenizer(vocab=[(piece, float(score)) for piece, score, _ in read_pieces(proto)],
                                        _spm_precompiled_charsmap=charsmap, model_max_length=seq_length)


@pytest.mark.slow
def test_albert_entities_equal_transformers_pipeline_on_the_same_offsets(taggers, texts):
    model, folder, _, _, loaded = taggers("albert")
    reference = _albert_reference_tokenizer(folder, TAGGER_SEQ)
    rows = loaded.tag_pieces(texts)
    counts = {}
    for aggregation in AGGREGATIONS + ("none",):
        pipe = transformers.pipeline("token-classification", model=model, tokenizer=reference,
                                     aggregation_strategy=aggregation)
        compared = 0
        for text, row, ours in zip(texts, rows, loaded.predict(texts, aggregation=aggregation)):
            if not text or row["window"].max(initial=0) > 0:  # the offsets given cover one window
                continue
            # transformers' ids are ours (sentencepiece's); a lone "▁" piece's span is not (ours is empty where the
            # next word starts, transformers' that word's first character): the pipeline is given ours.
            assert reference(text, add_special_tokens=False)["input_ids"] == row["token_ids"].tolist(), text
            offsets = [(0, 0)] + list(zip(row["char_starts"].tolist(), row["char_ends"].tolist())) + [(0, 0)]
            _assert_same_entities(ours, pipe(text, offset_mapping=offsets), text)
            compared += len(ours)
        counts[aggregation] = compared
    assert min(counts.values()) >= 30, counts


@pytest.mark.slow
def test_albert_entities_are_whole_words_for_every_aggregation(taggers, texts):
    _, _, tagger, _, loaded = taggers("albert")
    rows = loaded.tag_pieces(texts)
    counted = 0
    for aggregation in ("first", "max", "average"):
        for text, found, row in zip(texts, loaded.predict(texts, aggregation=aggregation), rows):
            if tagger.preprocessor.tokenizer.unknown_token in row["tokens"] or row["window"].max(initial=0) > 0:
                continue
            _assert_whole_words(text, found, row)
            counted += len(found)
            if _plain(text):  # the word is the text's, lower-cased (the pipeline joins decoded words without spaces)
                for entity in found:
                    assert "".join(entity["word"].split()) == "".join(text[entity["start"]:entity["end"]].lower().split())
    assert counted >= 30


def test_roberta_tagger_takes_a_batch_of_blank_texts(taggers):
    _, _, _, _, loaded = taggers("roberta")
    # Byte-level BPE has pieces of spaces (they may be tagged, as transformers' pipeline tags them); the batch is
    # answered, every span inside its text. (It failed: no non-blank character to anchor the offsets on.)
    texts = ["   ", " "]
    found = loaded.predict(texts)
    assert len(found) == 2
    assert all(0 <= e["start"] <= e["end"] <= len(text) for text, entities in zip(texts, found) for e in entities)


@pytest.mark.slow
def test_tagger_exports_before_the_family_read_as_wordpiece(taggers, tmp_path):
    _, _, _, export_dir, loaded = taggers("electra")
    assert loaded.tokenizer_kind == "wordpiece"
    expected = loaded.predict(MADE_TEXTS, aggregation="first")
    old = tmp_path / "old"
    shutil.copytree(export_dir, old)
    labels = as_written_before_the_manifest(str(old))
    metadata = json.loads(open(labels).read())
    assert metadata.pop("tokenizer") == "wordpiece" and metadata["suffix_indicator"] == "##"
    open(labels, "w").write(json.dumps(metadata))
    reloaded = load_tagger(str(old), warm_up=False)
    assert reloaded.tokenizer_kind == "wordpiece"
    assert reloaded.predict(MADE_TEXTS, aggregation="first") == expected
    open(labels, "w").write(json.dumps({**metadata, "tokenizer": "bpe"}))  # a kind no version wrote
    with pytest.raises(ValueError, match="records a tokenizer of kind 'bpe'"):
        load_tagger(str(old), warm_up=False)
    open(labels, "w").write(json.dumps({**metadata, "tokenizer": "unigram"}))  # a kind that exists, not this graph's
    with pytest.raises(ValueError, match="records tokenizer='unigram', but the SavedModel was exported with "
                                         "tokenizer='wordpiece'"):
        load_tagger(str(old), warm_up=False)


def test_words_join_as_the_family_decoders():
    from tokenizers import decoders

    metaspace = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    for tokens in (["\u2581new", "\u2581york", "er"], ["\u2581", "(", "x"], ["er", "\u2581a"], ["\u2581", "\u2581a"]):
        assert tokens_to_string(tokens, tokenizer="sentencepiece") == metaspace.decode(tokens)
    byte_level = decoders.ByteLevel()
    for tokens in (["\u0120New", "\u0120York"], ["Ã", "¯", "ve"], ["ð", "Ł"], ["abc", "\u0120中", "x"]):
        assert tokens_to_string(tokens, tokenizer="byte_bpe") == byte_level.decode(tokens)
    with pytest.raises(ValueError, match="Received: tokenizer='bpe'"):
        text_entities("a", {"window": np.zeros(0)}, ["O"], tokenizer="bpe")


def test_roberta_windows_of_a_long_sentence_are_the_exports(taggers):
    _, _, tagger, export_dir, loaded = taggers("roberta")
    tokenizer = tagger.preprocessor.tokenizer
    words = "Ada Lovelace loves Paris and New York , naïve café 😀 Berlin is nice too".split() * 3
    text, starts, ends = join_words(words)
    seq_length = tagger.preprocessor.seq_length
    windows = tagging_windows(tokenizer, [text], [starts], [ends], [[1] * len(words)], seq_length=seq_length,
                              stride=TAGGER_STRIDE)
    served = loaded.tag_pieces([text])[0]  # the export's windows of the same text
    assert len(windows["text_index"]) == int(served["window"].max()) + 1 > 1
    for w in range(len(windows["text_index"])):
        ids = windows["input_word_ids"].numpy()[w][1 : int(windows["input_mask"].numpy()[w].sum()) - 1]
        assert ids.tolist() == served["token_ids"][served["window"] == w].tolist()


# ---------------------------------------------------------------------------
# The reader
# ---------------------------------------------------------------------------


def _qa_pairs(tweets, tokenizer):  # noqa: F811
    """Short questions (at most QUESTION_LENGTH pieces, as transformers keeps them whole) and tweets as contexts."""
    questions = [" ".join(t.split()[:3]) for t in tweets[-30:-15]] + ["who wrote it?", "où?"]
    contexts = tweets[-15:] + ["Ada Lovelace wrote the first program in 1843, naïve café 😀. " * 3, "short words"]
    lengths = tokenizer(questions).merge_dims(1, 2).row_lengths().numpy()
    keep = [i for i, n in enumerate(lengths) if n <= QUESTION_LENGTH]
    return [questions[i] for i in keep], [contexts[i] for i in keep]


def _albert_windows(folder, question, context):
    """ALBERT's windows from `sentencepiece`'s ids: [CLS] q [SEP] context pieces [SEP], as transformers cuts them."""
    processor = spm.SentencePieceProcessor(model_file=os.path.join(folder, "spiece.model"))
    q, c = (processor.encode(albert_reference_text(text), out_type=int) for text in (question, context))
    budget = READER_SEQ - 3 - len(q)
    rows, first = [], 0
    while True:
        rows.append([2] + q + [3] + c[first : first + budget] + [3])
        if first + budget >= len(c):
            return rows
        first += budget - READER_STRIDE


@pytest.mark.slow
@pytest.mark.parametrize("name", ["albert", "roberta", "xlm-roberta"])
def test_reader_export_of_the_family_answers_with_offsets(readers, tweets, name):  # noqa: F811
    model, folder, labeler, reader = readers(name)
    tokenizer = labeler.preprocessor.tokenizer
    questions, contexts = _qa_pairs(tweets, tokenizer)
    assert len(questions) >= 12
    windows = {k: v.numpy() for k, v in qa_windows(tokenizer, tf.constant(questions), tf.constant(contexts),
                                                     READER_SEQ, READER_STRIDE, QUESTION_LENGTH).items()}
    if name in ROBERTA_PACKING:  # <s> q </s></s> c </s>, type ids 0: the fast tokenizer's overflowing windows
        expected = _reference_tokenizer(name, folder, READER_SEQ)(
            questions, contexts, truncation="only_second", max_length=READER_SEQ, stride=READER_STRIDE,
            return_overflowing_tokens=True, padding="max_length")
        np.testing.assert_array_equal(windows["input_word_ids"], expected["input_ids"])
        np.testing.assert_array_equal(windows["input_mask"], expected["attention_mask"])
        assert not windows["input_type_ids"].any()
    else:
        expected = [row for q, c in zip(questions, contexts) for row in _albert_windows(folder, q, c)]
        assert [list(row[row > 0]) for row in windows["input_word_ids"] * windows["input_mask"]] == expected
    assert len(windows["example_index"]) > len(questions)  # contexts of several windows
    answers = reader.predict(question=questions, context=contexts)
    assert sum(bool(a["answer"]) for a in answers) >= len(questions) - 1
    for answer, context in zip(answers, contexts):
        assert context[answer["start"]:answer["end"]] == answer["answer"]
    # One window: the export's probabilities are the Keras model's, masked to [CLS] and the context.
    single = [i for i in range(len(questions)) if (windows["example_index"] == i).sum() == 1]
    assert len(single) >= 2
    outputs = reader.all_windows([questions[i] for i in single], [contexts[i] for i in single])
    logits = labeler.predict([np.array([questions[i] for i in single]), np.array([contexts[i] for i in single])],
                             verbose=0)
    width = outputs["start_probabilities"].shape[1]
    allowed = outputs["context_mask"].copy()
    allowed[:, 0] = True
    for key in ("start", "end"):
        expected = _softmax(np.where(allowed, logits[f"{key}_logits"][:, :width], -1e9))
        np.testing.assert_allclose(outputs[f"{key}_probabilities"], expected, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("top_k,handle_impossible_answer", [(1, False), (3, True)])
def test_roberta_answers_equal_transformers_question_answering(readers, tweets, top_k, handle_impossible_answer):  # noqa: F811
    model, folder, labeler, reader = readers("roberta")
    questions, contexts = _qa_pairs(tweets, labeler.preprocessor.tokenizer)
    reference = _reference_tokenizer("roberta", folder, READER_SEQ)
    results = reader.predict(question=questions, context=contexts, top_k=top_k,
                             handle_impossible_answer=handle_impossible_answer)
    for question, context, ours in zip(questions, contexts, results):
        expected = reference_answers(model, reference, question, context, seq_length=READER_SEQ,
                                     stride=READER_STRIDE, top_k=top_k,
                                     handle_impossible_answer=handle_impossible_answer)
        ours = ours if top_k > 1 else [ours]
        assert [(a["start"], a["end"], a["answer"]) for a in ours] == \
            [(a["start"], a["end"], a["answer"]) for a in expected], (question, context)
        np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in expected], rtol=1e-4)


@pytest.mark.slow
def test_roberta_reader_needs_a_labeler_without_segments(readers, tmp_path):
    _, _, labeler, _ = readers("roberta")
    # RoBERTa's packing has no segment that tells the context: a labeler with its preprocessor masks none.
    assert BertSpanLabeler(labeler.encoder, preprocessor=labeler.preprocessor, context_segment_id=1).context_segment_id is None
    masked = BertSpanLabeler(labeler.encoder, context_segment_id=1)
    masked.preprocessor = labeler.preprocessor  # one built without it, given RoBERTa's preprocessor afterwards
    with pytest.raises(ValueError, match="context_segment_id=None"):
        export_reader(masked, str(tmp_path / "reader"), seq_length=READER_SEQ, doc_stride=READER_STRIDE,
                      max_question_length=QUESTION_LENGTH)
    with pytest.raises(ValueError, match=r"seq_length - max_question_length - 4"):
        export_reader(labeler, str(tmp_path / "reader"), seq_length=READER_SEQ, doc_stride=16,
                      max_question_length=QUESTION_LENGTH)

