"""The reader export: parity with transformers 4's question-answering decoding on an imported checkpoint."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.export import export_reader, load_reader
from bert_keras.export.manifest import read_manifest
from bert_keras.export.warmup import WARMUP_FILE, read_warmup_requests
from bert_keras.tasks import BertSpanLabeler
from bert_keras.text.corpora import minilm_vocab_path

SEQ_LENGTH, STRIDE = 48, 16
QUESTIONS = ["Who wrote the first program?", "Où est le café?", "什么 是 首都?", "what is it"]
CONTEXTS = [
    "Ada Lovelace wrote the first program in 1843, for Babbage's Analytical Engine; others followed. " * 4,
    "Le  café\tde Flore est à Saint-Germain-des-Prés, près du métro; on y boit un crème. 🙂☕ " * 3,
    "北京是中国的首都。The capital of China is Beijing, 人口很多 — naïve CAFÉ façade. " * 3,
    "short words only",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random BertForQuestionAnswering on the MiniLM vocabulary (30,522 uncased pieces: accents, CJK)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tests.checkpoints._models import perturb_torch

    try:
        vocab = minilm_vocab_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    config = transformers.BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=512)
    torch.manual_seed(0)
    model = perturb_torch(transformers.BertForQuestionAnswering(config), seed=1, scale=0.2)
    with torch.no_grad():  # peaked distributions: no near-ties between candidates of different spans
        model.qa_outputs.weight.mul_(40.0)
    folder = tmp_path_factory.mktemp("qa_checkpoint")
    model.save_pretrained(folder)
    shutil.copy(vocab, os.path.join(folder, "vocab.txt"))
    tokenizer = transformers.BertTokenizerFast(vocab=vocab, do_lower_case=True)
    return str(folder), model, tokenizer


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory):
    folder, _, _ = checkpoint
    labeler = BertSpanLabeler.from_checkpoint(folder, seq_length=SEQ_LENGTH)
    directory = str(tmp_path_factory.mktemp("reader") / "export")
    export_reader(labeler, directory, seq_length=SEQ_LENGTH, doc_stride=STRIDE, max_question_length=16)
    return directory, load_reader(directory, warm_up=True)


def reference_answers(model, tokenizer, question, context, seq_length=SEQ_LENGTH, stride=STRIDE, top_k=1,
                      handle_impossible_answer=False, max_answer_len=15, merge_duplicates=False):
    """transformers 4's QuestionAnsweringPipeline (preprocess, select_starts_ends, decode_spans, postprocess),
    on transformers 5's fast tokenizer and torch logits (5 removed the pipeline); without `merge_duplicates`, each
    span once with its best score (4.0 to 4.52 repeat a span once per window and piece span that gives it: each
    window offers spans, best first, until it has offered top_k distinct ones: a span below those ranks below
    top_k distinct spans overall, so the distinct top-k is complete)."""
    import torch

    encoded = tokenizer(question, context, truncation="only_second", max_length=seq_length, stride=stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    count = top_k * 2 + 10 if merge_duplicates else None  # 4.54-4.57 over-fetch with align_to_words
    answers, min_null_score = [], 1000000
    for span in range(len(encoded["input_ids"])):
        ids = np.array([encoded["input_ids"][span]])
        attention_mask = np.array([encoded["attention_mask"][span]])
        with torch.no_grad():
            output = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(attention_mask),
                           token_type_ids=torch.tensor([encoded["token_type_ids"][span]]))
        start, end = output.start_logits.numpy(), output.end_logits.numpy()
        p_mask = np.array([[tok != 1 for tok in encoded.sequence_ids(span)]], dtype=int)
        p_mask[0, np.nonzero(ids[0] == tokenizer.cls_token_id)[0]] = 0  # [CLS] stays unmasked
        undesired_tokens = np.abs(p_mask - 1) & attention_mask
        start = np.where(undesired_tokens == 0, -10000.0, start)
        end = np.where(undesired_tokens == 0, -10000.0, end)
        start = np.exp(start - start.max(axis=-1, keepdims=True))
        start = start / start.sum()
        end = np.exp(end - end.max(axis=-1, keepdims=True))
        end = end / end.sum()
        if handle_impossible_answer:
            min_null_score = min(min_null_score, (start[0, 0] * end[0, 0]).item())
        start[0, 0] = end[0, 0] = 0.0
        candidates = np.tril(np.triu(np.matmul(start[..., None], end[:, None])), max_answer_len - 1)
        flat = candidates.flatten()
        if count is None:
            order = np.argsort(-flat, kind="stable")
        elif count == 1:
            order = [np.argmax(flat)]
        elif len(flat) < count:
            order = np.argsort(-flat)
        else:
            order = np.argpartition(-flat, count)[:count]
            order = order[np.argsort(-flat[order])]
        starts, ends = np.unravel_index(order, candidates.shape)[1:]
        desired = np.isin(starts, undesired_tokens.nonzero()) & np.isin(ends, undesired_tokens.nonzero())
        encoding = encoded[span]
        offered = set()  # without merging: a window offers its first top_k distinct spans (the rest rank below them)
        for s, e in zip(starts[desired], ends[desired]):
            score = candidates[0, s, e].item()
            if not merge_duplicates and (len(offered) >= top_k or score <= 0):
                break
            try:  # get_indices with align_to_words=True
                begin = encoding.word_to_chars(encoding.token_to_word(s), sequence_index=1)[0]
                finish = encoding.word_to_chars(encoding.token_to_word(e), sequence_index=1)[1]
            except Exception:  # noqa: BLE001 - the pipeline's own fallback
                begin, finish = encoding.offsets[s][0], encoding.offsets[e][1]
            offered.add((begin, finish))
            same = [a for a in answers if a["answer"].lower() == context[begin:finish].lower()]
            if merge_duplicates and same:
                same[0]["score"] += score
            else:
                answers.append({"score": score, "start": begin, "end": finish, "answer": context[begin:finish]})
    if not merge_duplicates:
        best = {}
        for answer in answers:
            key = (answer["start"], answer["end"])
            if key not in best or answer["score"] > best[key]["score"]:
                best[key] = answer
        answers = list(best.values())
    if handle_impossible_answer:
        answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
    # Spans of zero probability (outside the context, [CLS]) fill a short context's top-k there; not here.
    answers = [a for a in answers if a["score"] > 0]
    return sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]


def _assert_same(ours, expected, context):
    assert [(a["start"], a["end"], a["answer"]) for a in ours] == [(a["start"], a["end"], a["answer"]) for a in expected]
    np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in expected], rtol=1e-4)
    assert all(context[a["start"] : a["end"]] == a["answer"] for a in ours)


@pytest.mark.slow  # the `exported` fixture: a checkpoint, an export and its load (~13 s)
@pytest.mark.parametrize("top_k,handle_impossible_answer", [
    (1, False), (3, True), (1, True), (3, False),
])
def test_answers_equal_transformers_question_answering_pipeline(checkpoint, exported, top_k, handle_impossible_answer):
    _, model, tokenizer = checkpoint
    _, reader = exported
    results = reader.predict(question=QUESTIONS, context=CONTEXTS, top_k=top_k,
                             handle_impossible_answer=handle_impossible_answer)
    for question, context, ours in zip(QUESTIONS, CONTEXTS, results):
        expected = reference_answers(model, tokenizer, question, context, top_k=top_k,
                                     handle_impossible_answer=handle_impossible_answer)
        _assert_same(ours if top_k > 1 else [ours], expected, context)


@pytest.mark.slow
def test_merged_duplicates_equal_the_last_transformers_4(checkpoint, exported):
    _, model, tokenizer = checkpoint
    _, reader = exported
    for question, context in zip(QUESTIONS, CONTEXTS):
        ours = reader.predict(question=question, context=context, top_k=3, merge_duplicates=True)
        _assert_same(ours, reference_answers(model, tokenizer, question, context, top_k=3, merge_duplicates=True),
                     context)


@pytest.mark.slow
def test_contexts_longer_than_one_window_are_read_in_all_windows(exported, checkpoint):
    _, model, tokenizer = checkpoint
    _, reader = exported
    windows = reader.all_windows(QUESTIONS[:1], CONTEXTS[:1])
    assert len(windows["example_index"]) == 4  # the parity above covers every window of it
    short = reader.predict(question="why", context="a b", max_answer_len=1, top_k=5)
    assert [a["answer"] for a in short] in (["a", "b"], ["b", "a"])  # only single-piece spans in the context


@pytest.mark.slow
def test_serving_default_gives_the_best_answer_in_the_graph(exported):
    directory, reader = exported
    expected = reader.predict(question=QUESTIONS, context=CONTEXTS)
    saved = tf.saved_model.load(directory)  # after `import tensorflow_text` (bert_keras imports it)
    outputs = saved.signatures["serving_default"](question=tf.constant(QUESTIONS), context=tf.constant(CONTEXTS))
    for i, answer in enumerate(expected):
        assert (int(outputs["start"][i]), int(outputs["end"][i])) == (answer["start"], answer["end"])
        assert outputs["answer"][i].numpy().decode("utf-8") == answer["answer"]
        np.testing.assert_allclose(float(outputs["score"][i]), answer["score"], rtol=1e-5)
    null = reader.predict(question=QUESTIONS, context=CONTEXTS, handle_impossible_answer=True, top_k=10_000)
    null_scores = [next(a["score"] for a in answers if a["answer"] == "") for answers in null]
    np.testing.assert_allclose(outputs["null_score"].numpy(), null_scores, rtol=1e-5)


@pytest.mark.slow
def test_a_loaded_reader_holds_window_range_alone_and_loads_the_rest_when_called(exported):
    directory, reader = exported
    # predict reads window_range only: the string endpoints for TF Serving and all windows at once are not loaded.
    assert sorted(reader._saved.signatures) == ["window_range"], sorted(reader._saved.signatures)
    assert reader.warm_up_seconds > 0  # its warm-up requests ran on window_range
    expected = reader.predict(question=QUESTIONS, context=CONTEXTS, top_k=3)
    saved = tf.saved_model.load(directory)
    theirs = saved.signatures["windows"](question=tf.constant(QUESTIONS), context=tf.constant(CONTEXTS))
    ours = reader.all_windows(QUESTIONS, CONTEXTS)
    assert sorted(ours) == sorted(theirs) and sorted(reader._saved.signatures) == ["window_range"]
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value.numpy(), rtol=1e-6, atol=1e-7, err_msg=name)
    # Calling the reader gives serving_default, loaded at the first call.
    outputs = reader(tf.constant(QUESTIONS), tf.constant(CONTEXTS))
    assert "serving_default" in reader._saved.signatures
    for i, answers in enumerate(expected):
        assert outputs["answer"][i].numpy().decode("utf-8") == answers[0]["answer"]
    again = reader.predict(question=QUESTIONS, context=CONTEXTS, top_k=3)
    for ours, theirs, context in zip(again, expected, CONTEXTS):
        _assert_same(ours, theirs, context)


@pytest.mark.slow
def test_empty_and_blank_contexts_give_the_empty_answer(exported):
    _, reader = exported
    assert reader.predict(question="why", context="") == {"score": 0.0, "start": 0, "end": 0, "answer": ""}
    assert reader.predict(question="", context=" \t ")["answer"] == ""
    impossible = reader.predict(question="why", context="", handle_impossible_answer=True)
    assert impossible["answer"] == "" and impossible["score"] == pytest.approx(1.0)  # [CLS] holds all mass


@pytest.mark.slow
def test_questions_and_contexts_are_strings_or_lists_of_them(exported):
    # A dict was iterated as the list of its keys and answered (a hostile review's find).
    _, exported = exported
    with pytest.raises(TypeError, match=r"Expected `question` to be a str or a list of str. Received a dict\."):
        exported.predict({"q": 1}, "Ada wrote the first program.")
    with pytest.raises(TypeError, match=r"Expected `context` to be a str or a list of str. Received a set\."):
        exported.predict("who?", {"Ada wrote it."})
    with pytest.raises(TypeError, match=r"Expected `context` to hold strings. Received an item of type int: 3"):
        exported.predict(["who?"], [3])
    arrays = exported.predict(np.array(["Who wrote it?"]), np.array(["Ada wrote it."]))
    assert arrays == exported.predict(["Who wrote it?"], ["Ada wrote it."]) and len(arrays) == 1


@pytest.mark.slow
def test_the_export_writes_its_settings_and_a_warm_up_file_that_replays(exported):
    directory, reader = exported
    manifest = read_manifest(directory)
    assert manifest.pop("tokenizer")["kind"] == "wordpiece"
    assert manifest == {"format": "bert_keras export", "version": 2, "kind": "reader",
                                        "inputs": ["question", "context"], "seq_length": SEQ_LENGTH,
                                        "doc_stride": STRIDE, "max_question_length": 16, "max_answer_len": 15,
                                        "dtype": "float32"}
    requests = read_warmup_requests(os.path.join(directory, "assets.extra", WARMUP_FILE))
    assert [sorted(r) for r in requests] == [["context", "question"]] * 3
    assert reader.warm_up_seconds > 0


def test_export_refuses_a_model_without_a_preprocessor(tmp_path):
    from bert_keras import BertEncoder

    labeler = BertSpanLabeler(BertEncoder(vocab_size=40, num_layers=1, hidden_size=8, num_heads=2,
                                          intermediate_size=16))
    with pytest.raises(ValueError, match="expected a BertSpanLabeler with a BertPreprocessor"):
        export_reader(labeler, str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_a_long_context_runs_through_the_model_a_few_windows_at_a_time(monkeypatch):
    # The fresh review after issue 47: every window of a context went into one call (a 0.9 MB context: 3.7 GB).
    from bert_keras import BertEncoder
    from bert_keras.export.reader import window_probabilities
    from bert_keras.text import BertPreprocessor

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
    encoder = BertEncoder(vocab_size=40, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16)
    labeler = BertSpanLabeler(encoder, preprocessor=BertPreprocessor(vocab, seq_length=16))
    serving, calls = labeler.serving_outputs, []

    def counted(packed):
        calls.append(int(packed["input_word_ids"].shape[0]))
        return serving(packed)

    monkeypatch.setattr(labeler, "serving_outputs", counted)
    questions = tf.constant(["w1 w2", "w3"])
    # 40 context pieces beside 2 question pieces: windows of 11 every 7, 6 of them; the second example 1.
    contexts = tf.constant([" ".join(f"w{i % 30 + 5}" for i in range(40)), "w9 w8"])
    tokenizer = labeler.preprocessor.tokenizer
    # Run eagerly, the loop over calls is a Python loop: each call of the model is seen.
    chunked = window_probabilities(labeler, tokenizer, questions, contexts, 16, 4, 4, windows_per_call=2)
    assert calls == [2, 2, 2, 1]  # 7 windows, 2 per call
    calls.clear()
    whole = window_probabilities(labeler, tokenizer, questions, contexts, 16, 4, 4, windows_per_call=100)
    assert calls == [7]
    for name, value in chunked.items():
        np.testing.assert_allclose(value.numpy(), whole[name].numpy(), atol=1e-6)


@pytest.mark.slow
def test_default_windows_of_384_with_stride_128_equal_transformers(checkpoint, tmp_path):
    folder, model, tokenizer = checkpoint
    directory = export_reader(BertSpanLabeler.from_checkpoint(folder), str(tmp_path / "export"))  # 384, 128, 64
    reader = load_reader(directory, warm_up=False)
    context = " ".join(CONTEXTS) * 3  # about 1,000 pieces: four windows of 384
    windows = reader.all_windows(QUESTIONS[:1], [context])
    assert len(windows["example_index"]) == len(tokenizer(QUESTIONS[0], context, truncation="only_second",
                                                          max_length=384, stride=128,
                                                          return_overflowing_tokens=True)["input_ids"]) > 2
    for question in QUESTIONS:
        for top_k, handle in ((1, False), (3, True)):
            ours = reader.predict(question=question, context=context, top_k=top_k, handle_impossible_answer=handle)
            expected = reference_answers(model, tokenizer, question, context, seq_length=384, stride=128,
                                         top_k=top_k, handle_impossible_answer=handle)
            _assert_same(ours if top_k > 1 else [ours], expected, context)


def _short_labeler(max_sequence_length=40, seq_length=32):
    """A tiny span labeler on a native encoder of `max_sequence_length` positions, packing to `seq_length`."""
    from bert_keras import BertEncoder
    from bert_keras.text import BertPreprocessor

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
    encoder = BertEncoder(vocab_size=40, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=max_sequence_length)
    return BertSpanLabeler(encoder, preprocessor=BertPreprocessor(vocab, seq_length=seq_length))


def test_the_windows_default_to_the_models_own_length():
    # Issue 55 item 10: a QA model of 40 positions exported with seq_length 384, the function's default.
    from bert_keras.export.reader import window_settings

    labeler = _short_labeler(40, 32)
    tokenizer = labeler.preprocessor.tokenizer
    # 32 pieces: questions of up to (32 - 3) // 4 = 7, 22 context pieces beside them, 11 shared (half of them).
    assert window_settings(labeler, tokenizer) == (32, 11, 7)
    assert window_settings(labeler, tokenizer, seq_length=40) == (40, 14, 9)
    # transformers' pipeline defaults where the model holds them: min(model_max_length, 384), stride 128, 64.
    assert window_settings(_short_labeler(512, 512), tokenizer) == (384, 128, 64)
    assert window_settings(_short_labeler(512, 128), tokenizer) == (128, 47, 31)


def test_a_length_the_encoder_cannot_hold_is_refused_at_export(tmp_path):
    labeler = _short_labeler(40, 32)
    with pytest.raises(ValueError, match=r"`seq_length`.*max_sequence_length=40.*Received: seq_length=384"):
        export_reader(labeler, str(tmp_path / "out"), seq_length=384)
    with pytest.raises(ValueError, match=r"`seq_length`.*max_sequence_length=40.*Received: seq_length=41"):
        export_reader(labeler, str(tmp_path / "out"), seq_length=41)
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.slow  # an export and its load
def test_an_imported_short_model_serves_long_contexts_at_its_own_length(tmp_path):
    # Issue 55 item 10, as found: from_checkpoint(folder, seq_length=32) of a 40-position model, exported with the
    # defaults, wrote seq_length 384 and failed at predict ("exceeds max_sequence_length (40)").
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
    folder = str(tmp_path / "checkpoint")
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=40)
    torch.manual_seed(0)
    transformers.BertForQuestionAnswering(config).save_pretrained(folder)
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    labeler = BertSpanLabeler.from_checkpoint(folder, seq_length=32)
    assert labeler.encoder.max_sequence_length == 40
    directory = export_reader(labeler, str(tmp_path / "export"))
    manifest = read_manifest(directory)
    assert (manifest["seq_length"], manifest["doc_stride"], manifest["max_question_length"]) == (32, 11, 7)
    reader = load_reader(directory, warm_up=False)
    context = " ".join(f"w{i % 30 + 5}" for i in range(200))  # 200 pieces: many windows of 32
    answer = reader.predict(question="w1 w2", context=context)
    assert context[answer["start"] : answer["end"]] == answer["answer"] != ""


def _lovelace_window(start_p, end_p):
    """One window of "Ada Lovelace": [CLS] ada love ##la ##ce [SEP], with the given probabilities."""
    return {"start_probabilities": np.array([start_p], "float32"), "end_probabilities": np.array([end_p], "float32"),
            "context_mask": np.array([[False, True, True, True, True, False]]),
            "char_starts": np.array([[0, 0, 4, 8, 10, 0]]), "char_ends": np.array([[0, 3, 8, 10, 12, 0]]),
            "word_starts": np.array([[0, 0, 4, 4, 4, 0]]), "word_ends": np.array([[0, 3, 12, 12, 12, 0]])}


def test_top_k_answers_are_distinct_spans_each_with_its_best_score():
    # Issue 55 item 8: `predict --top-k 3` repeated one span three times (three piece spans of one word, widened to it).
    from bert_keras.export.reader import decode_answers

    context = "Ada Lovelace"
    first = _lovelace_window([0.0, 0.05, 0.5, 0.3, 0.15, 0.0], [0.0, 0.05, 0.2, 0.3, 0.45, 0.0])
    answers = decode_answers(first, context, top_k=3)
    # love..##ce 0.5 x 0.45; ada..##ce 0.05 x 0.45 (over ada..##la 0.015, ada..love 0.01); ada 0.05 x 0.05.
    assert [(a["start"], a["end"], a["answer"]) for a in answers] == [(4, 12, "Lovelace"), (0, 12, "Ada Lovelace"),
                                                                      (0, 3, "Ada")]
    np.testing.assert_allclose([a["score"] for a in answers], [0.225, 0.0225, 0.0025], rtol=1e-6)
    pieces = decode_answers(first, context, top_k=3, align_to_words=False)
    assert [(a["start"], a["end"]) for a in pieces] == [(4, 12), (4, 10), (8, 12)]  # three spans of characters
    # A second window holding the same span: once, with the better of its two scores.
    second = _lovelace_window([0.0, 0.0, 0.6, 0.2, 0.2, 0.0], [0.0, 0.1, 0.0, 0.1, 0.8, 0.0])
    both = {key: np.concatenate([first[key], second[key]]) for key in first}
    answers = decode_answers(both, context, top_k=2)
    assert [(a["answer"], round(a["score"], 6)) for a in answers] == [("Lovelace", 0.48), ("Ada Lovelace", 0.0225)]


def test_best_answers_and_window_ranges_read_in_chunks_equal_all_windows_at_once():
    # Issue 55 item 6: a context's windows were all packed at once (a 1 MB context: +0.65 GB). Packed, run and
    # reduced a few at a time, the answers and the windows are the same.
    from bert_keras.export.reader import best_answers, chunked_best_answers, window_probabilities

    labeler = _short_labeler(40, 16)
    tokenizer = labeler.preprocessor.tokenizer
    questions = tf.constant(["w1 w2", "w3", "w4"])
    contexts = tf.constant([" ".join(f"w{i % 30 + 5}" for i in range(40)), "w9 w8", ""])  # 6 windows, 1, 1
    whole = window_probabilities(labeler, tokenizer, questions, contexts, 16, 4, 4, windows_per_call=100)
    expected = best_answers(whole, contexts, 3)
    chunked = chunked_best_answers(labeler, tokenizer, questions, contexts, 16, 4, 4, 3, windows_per_call=2)
    for name, value in expected.items():
        assert chunked[name].numpy().tolist() == value.numpy().tolist(), name
    assert chunked["score"].numpy()[2] == 0.0 and chunked["answer"].numpy()[0] != b""
    parts = [window_probabilities(labeler, tokenizer, questions, contexts, 16, 4, 4, windows_per_call=2,
                                  window_range=(begin, 3)) for begin in (0, 3, 6, 9)]
    assert [int(part["window_count"]) for part in parts] == [8] * 4
    assert [len(part["example_index"]) for part in parts] == [3, 3, 2, 0]
    for begin, part in zip((0, 3, 6), parts):  # each range cut to its own longest window
        for name, value in whole.items():
            rows = value.numpy()[begin : begin + 3]
            if value.shape.rank == 2:
                rows = rows[:, : part[name].shape[1]]
            np.testing.assert_array_equal(part[name].numpy(), rows, err_msg=name)


@pytest.mark.slow
def test_predict_reading_a_few_windows_at_a_time_equals_reading_all_at_once(exported, monkeypatch):
    from bert_keras.export.kinds import reader as reader_kind

    _, reader = exported
    assert reader._window_range is not None
    reader.whole()  # `windows` loaded too, which predict calls as an export before window_range would
    monkeypatch.setattr(reader_kind, "WINDOWS_PER_READ", 1)  # one window per call: 4 calls for the first context
    for top_k in (1, 3):
        chunked = reader.predict(question=QUESTIONS, context=CONTEXTS, top_k=top_k, handle_impossible_answer=True)
        monkeypatch.setattr(reader, "_window_range", None)  # as an export before window_range: all windows at once
        whole = reader.predict(question=QUESTIONS, context=CONTEXTS, top_k=top_k, handle_impossible_answer=True)
        monkeypatch.undo()
        monkeypatch.setattr(reader_kind, "WINDOWS_PER_READ", 1)
        assert len(whole) == 4
        for ours, theirs, context in zip(chunked, whole, CONTEXTS):
            # One window per call or all at once: the same spans; scores up to float rounding (other batch shapes).
            _assert_same(ours if top_k > 1 else [ours], theirs if top_k > 1 else [theirs], context)


@pytest.mark.slow
def test_predict_top_k_on_the_command_line_gives_distinct_answers(exported, capsys):
    # Issue 55 item 8, as found: `bert-keras predict --top-k 3` on a reader printed one span three times.
    import json

    from bert_keras import cli

    directory, reader = exported
    for question, context in zip(QUESTIONS, CONTEXTS):
        assert cli.main(["predict", "--model", directory, "--question", question, "--context", context, "--top-k", "3",
                         "--format", "jsonl"]) == 0
        [record] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        spans = [(a["start"], a["end"]) for a in record["answers"]]
        assert len(spans) == 3 and len(set(spans)) == 3, record
        expected = reader.predict(question=question, context=context, top_k=3)
        assert spans == [(a["start"], a["end"]) for a in expected]
