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
    on transformers 5's fast tokenizer and torch logits (5 removed the pipeline)."""
    import torch

    encoded = tokenizer(question, context, truncation="only_second", max_length=seq_length, stride=stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    count = top_k * 2 + 10 if merge_duplicates else top_k  # 4.54-4.57 over-fetch with align_to_words
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
        if count == 1:
            order = [np.argmax(flat)]
        elif len(flat) < count:
            order = np.argsort(-flat)
        else:
            order = np.argpartition(-flat, count)[:count]
            order = order[np.argsort(-flat[order])]
        starts, ends = np.unravel_index(order, candidates.shape)[1:]
        desired = np.isin(starts, undesired_tokens.nonzero()) & np.isin(ends, undesired_tokens.nonzero())
        encoding = encoded[span]
        for s, e in zip(starts[desired], ends[desired]):
            score = candidates[0, s, e].item()
            try:  # get_indices with align_to_words=True
                begin = encoding.word_to_chars(encoding.token_to_word(s), sequence_index=1)[0]
                finish = encoding.word_to_chars(encoding.token_to_word(e), sequence_index=1)[1]
            except Exception:  # noqa: BLE001 - the pipeline's own fallback
                begin, finish = encoding.offsets[s][0], encoding.offsets[e][1]
            same = [a for a in answers if a["answer"].lower() == context[begin:finish].lower()]
            if merge_duplicates and same:
                same[0]["score"] += score
            else:
                answers.append({"score": score, "start": begin, "end": finish, "answer": context[begin:finish]})
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
    windows = reader._windows(question=tf.constant(QUESTIONS[:1]), context=tf.constant(CONTEXTS[:1]))
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
def test_empty_and_blank_contexts_give_the_empty_answer(exported):
    _, reader = exported
    assert reader.predict(question="why", context="") == {"score": 0.0, "start": 0, "end": 0, "answer": ""}
    assert reader.predict(question="", context=" \t ")["answer"] == ""
    impossible = reader.predict(question="why", context="", handle_impossible_answer=True)
    assert impossible["answer"] == "" and impossible["score"] == pytest.approx(1.0)  # [CLS] holds all mass


@pytest.mark.slow
def test_the_export_writes_its_settings_and_a_warm_up_file_that_replays(exported):
    directory, reader = exported
    manifest = read_manifest(directory)
    assert manifest.pop("tokenizer")["kind"] == "wordpiece"
    assert manifest == {"format": "bert_keras export", "version": 1, "kind": "reader",
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
    windows = reader._windows(question=tf.constant(QUESTIONS[:1]), context=tf.constant([context]))
    assert len(windows["example_index"]) == len(tokenizer(QUESTIONS[0], context, truncation="only_second",
                                                          max_length=384, stride=128,
                                                          return_overflowing_tokens=True)["input_ids"]) > 2
    for question in QUESTIONS:
        for top_k, handle in ((1, False), (3, True)):
            ours = reader.predict(question=question, context=context, top_k=top_k, handle_impossible_answer=handle)
            expected = reference_answers(model, tokenizer, question, context, seq_length=384, stride=128,
                                         top_k=top_k, handle_impossible_answer=handle)
            _assert_same(ours if top_k > 1 else [ours], expected, context)
