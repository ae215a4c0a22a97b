"""ModernBERT's task heads from folders as transformers 5 saves them: token classification, question answering and
the masked LM, each with its `head` (dense, activation, LayerNorm) before the output layer (issue 57).

A tiny random model of transformers' own class (every weight perturbed) with a tokenizer of ModernBERT's kind trained
on tweets; our task on the folder must answer as transformers' pipeline does on the same raw strings: the
token-classification pipeline's entities, the question-answering pipeline's answers, the fill-mask pipeline's
tokens and probabilities within 1e-4.
"""

import unicodedata

import numpy as np
import pytest

from bert_keras.checkpoints import load_checkpoint, load_pretrained
from bert_keras.heads import MaskedLMHead
from bert_keras.layers import PredictionTransform
from bert_keras.tasks import BertSpanLabeler, BertTokenClassifier
from bert_keras.text.corpora import load_tweets
from tests.checkpoints.test_modernbert import TEXTS, save_modernbert, save_modernbert_tokenizer

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SEQ = 64
# Words the tokenizer (trained on airline tweets) splits into several pieces, so that aggregation matters.
ENTITY_TEXTS = TEXTS + ["Paris and Zürich are far from Tokyo", "@united flight from Denver to Chicago was late",
                        "Thanks @JetBlue, see you in Boston 🙂"]
QUESTIONS = ["Where was the flight going?", "who is late", "why?"]
CONTEXTS = ["@united flight from Denver to Chicago was late again, three hours at the gate",
            "Thanks @JetBlue for the great service, see you in Boston next week",
            "I just don't trust my life in google's hands #driverless"]


def task_folder(folder, model_class, seed=0, **overrides):
    """A ModernBERT task model of transformers' class `model_class` with the tweets' tokenizer, saved in `folder`."""
    size, vocab = save_modernbert_tokenizer(folder)
    return save_modernbert(folder, model_class=model_class, seed=seed, vocab_size=size, pad_token_id=vocab["[PAD]"],
                           cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"], bos_token_id=vocab["[CLS]"],
                           eos_token_id=vocab["[SEP]"], **overrides)


def _batch(folder, *texts):
    batch = transformers.AutoTokenizer.from_pretrained(str(folder))(*texts, padding="max_length", max_length=SEQ,
                                                                   return_tensors="pt")
    batch.pop("token_type_ids", None)  # ModernBERT has no segments
    return batch


@pytest.fixture(scope="module", params=[False, True], ids=["no_biases", "biases"])
def tagger_folder(request, tmp_path_factory):
    """`ModernBertForTokenClassification`; with `classifier_bias` and `norm_bias` (the head's optional biases) or not."""
    folder = tmp_path_factory.mktemp("modernbert_tagger")
    model = task_folder(folder, "ModernBertForTokenClassification", classifier_bias=request.param,
                        norm_bias=request.param, classifier_activation="gelu_new",
                        id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)})
    return model.eval(), folder


@pytest.mark.slow  # 4 s in the full run of 450d6b9
def test_a_token_classifier_reads_its_head_and_gives_transformers_logits(tagger_folder):
    model, folder = tagger_folder
    tagger = BertTokenClassifier.from_checkpoint(str(folder), seq_length=SEQ)
    assert tagger.label_names == TAGS
    transform = tagger.classifier_head.transform
    assert isinstance(transform, PredictionTransform) and transform.activation == "gelu_approximate"
    assert transform.use_bias == model.config.classifier_bias and transform.use_norm_bias == model.config.norm_bias
    batch = _batch(folder, TEXTS)
    with torch.no_grad():
        expected = model(**batch).logits.numpy()
    got = np.asarray(tagger(np.array(TEXTS)))
    real = batch["attention_mask"].numpy().astype(bool)
    assert np.abs(got - expected)[real].max() < 1e-5
    # The head's transform is part of the task's config: saved and rebuilt with its weights.
    assert BertTokenClassifier.from_config(tagger.get_config()).classifier_head.transform.options() == transform.options()


@pytest.fixture(scope="module")
def tagger_export(tagger_folder, tmp_path_factory):
    """The folder's tagger exported and loaded, once per folder: each aggregation's test reads the same export (it
    was exported and loaded again for each)."""
    from bert_keras.export import export_tagger, load_tagger

    _, folder = tagger_folder
    tagger = BertTokenClassifier.from_checkpoint(str(folder), seq_length=SEQ)
    return load_tagger(export_tagger(tagger, str(tmp_path_factory.mktemp("modernbert_export") / "tagger"), tag_names=TAGS))


@pytest.mark.slow  # an export and its load
@pytest.mark.parametrize("aggregation", ["none", "simple", "first"])
def test_an_imported_tagger_s_export_gives_the_pipeline_s_entities(tagger_folder, tagger_export, aggregation):
    model, folder = tagger_folder
    loaded = tagger_export
    pipe = transformers.pipeline("token-classification", model=model,
                                 tokenizer=transformers.AutoTokenizer.from_pretrained(str(folder)),
                                 aggregation_strategy=aggregation)
    # The texts above and tweets, the spans of pieces "Ġword" and of a space alone ("Ġ") included; not a text that
    # NFC changes (the in-graph offsets count the normalized text's code points: ModernBertTokenizer's docstring).
    texts = [text for text in ENTITY_TEXTS + load_tweets()[0][-40:]
             if unicodedata.is_normalized("NFC", text) and len(pipe.tokenizer.tokenize(text)) <= SEQ - 2]
    assert len(texts) >= 30
    found = 0
    for text, ours in zip(texts, loaded.predict(texts, aggregation=aggregation)):
        theirs = pipe(text)
        assert [{k: v for k, v in e.items() if k != "score"} for e in ours] == [
            {k: (int(v) if k in ("start", "end", "index") else v) for k, v in e.items() if k != "score"}
            for e in theirs], text
        np.testing.assert_allclose([e["score"] for e in ours], [float(e["score"]) for e in theirs], rtol=1e-4)
        found += len(ours)
    assert found >= 20, found


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("modernbert_reader")
    return task_folder(folder, "ModernBertForQuestionAnswering", seed=1).eval(), folder


@pytest.mark.slow  # 3 s in the full run of 450d6b9
def test_a_question_answering_model_reads_its_head_and_gives_transformers_logits(reader_folder):
    model, folder = reader_folder
    reader = BertSpanLabeler.from_checkpoint(str(folder), seq_length=SEQ)
    assert reader.span_head.transform is not None and reader.head_transform["use_bias"] is False
    batch = _batch(folder, QUESTIONS, CONTEXTS)
    with torch.no_grad():
        expected = model(**batch)
    got = reader([np.array(QUESTIONS), np.array(CONTEXTS)])
    # Our logits are masked outside [CLS] and the context, as the pipeline's p_mask: compare where they are not.
    sequence_ids = [transformers.AutoTokenizer.from_pretrained(str(folder))(q, c).sequence_ids()
                    for q, c in zip(QUESTIONS, CONTEXTS)]
    for name, theirs in (("start_logits", expected.start_logits), ("end_logits", expected.end_logits)):
        ours = np.asarray(got[name])
        for row, ids in enumerate(sequence_ids):
            context = [i for i, segment in enumerate(ids) if segment == 1]
            assert np.abs(ours[row, context] - theirs.numpy()[row, context]).max() < 1e-5
            assert ours[row, 1] < -1e8  # the question's pieces are never an answer


@pytest.mark.slow  # an export and its load
def test_an_imported_reader_s_export_gives_the_pipeline_s_answers(reader_folder, tmp_path):
    """transformers 5 removed the question-answering pipeline: its transcription in tests/export/test_export_reader.py
    (transformers 4's pre- and post-processing on 5's tokenizer and the model's logits) is the reference."""
    from bert_keras.export import export_reader, load_reader
    from tests.export.test_export_reader import reference_answers

    model, folder = reader_folder
    reader = BertSpanLabeler.from_checkpoint(str(folder), seq_length=SEQ)
    loaded = load_reader(export_reader(reader, str(tmp_path / "reader"), seq_length=SEQ, doc_stride=16),
                         warm_up=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))

    def without_segments(token_type_ids=None, **inputs):  # ModernBERT takes no token_type_ids
        return model(**inputs)

    for question, context in zip(QUESTIONS, CONTEXTS):
        theirs = reference_answers(without_segments, tokenizer, question, context, seq_length=SEQ, stride=16, top_k=3)
        ours = loaded.predict(question=question, context=context, top_k=3)
        assert [(a["start"], a["end"], a["answer"]) for a in ours] == [
            (a["start"], a["end"], a["answer"]) for a in theirs], question
        np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in theirs], rtol=1e-4)


@pytest.fixture(scope="module")
def masked_lm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("modernbert_mlm")
    return task_folder(folder, "ModernBertForMaskedLM", seed=2, classifier_activation="relu").eval(), folder


def test_the_masked_lm_head_gives_the_fill_mask_pipeline_s_tokens_and_probabilities(masked_lm_folder):
    model, folder = masked_lm_folder
    pretrained = load_pretrained(str(folder), seq_length=SEQ, with_heads=["mlm"])
    head = pretrained.loaded.heads["mlm"]
    assert isinstance(head, MaskedLMHead) and head.activation == "relu"
    assert not head.use_transform_bias and not head.use_norm_bias and head.use_output_bias
    assert head.embedding is pretrained.encoder.embeddings.word_embeddings  # the decoder is tied, as transformers'
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    pipe = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=5)
    texts = ["I love [MASK] flights", "@united [MASK] is late again", "Héllo wörld [MASK] 😀"]
    # "[MASK]" written in a text is the special token for the tokenizers library, a word for the in-graph tokenizer:
    # the ids are the library's, the rest ours.
    encoded = tokenizer(texts, padding="max_length", max_length=SEQ, return_tensors="np")
    ids = encoded["input_ids"].astype("int32")
    packed = {"input_word_ids": ids, "input_mask": encoded["attention_mask"].astype("int32"),
              "input_type_ids": np.zeros_like(ids)}
    sequence = pretrained.encoder(packed)["sequence_output"]
    positions = np.argmax(ids == tokenizer.mask_token_id, axis=1)[:, None]
    probabilities = np.asarray(torch.softmax(torch.tensor(np.asarray(head(sequence, positions))[:, 0]), -1))
    for text, row in zip(texts, probabilities):
        theirs = pipe(text)
        top = np.argsort(-row)[:5]
        assert top.tolist() == [answer["token"] for answer in theirs], text
        np.testing.assert_allclose(row[top], [answer["score"] for answer in theirs], atol=1e-4)


def test_a_masked_lm_folder_loads_its_head_with_the_pretraining_heads(masked_lm_folder):
    _, folder = masked_lm_folder
    loaded = load_checkpoint(str(folder))
    assert list(loaded.heads) == ["mlm"] and loaded.summary.unused == []


def test_a_decoder_untied_from_the_embeddings_leaves_the_head_unread_saying_so(tmp_path, caplog):
    task_folder(tmp_path, "ModernBertForMaskedLM", tie_word_embeddings=False)
    loaded = load_checkpoint(str(tmp_path), with_heads=["mlm"])
    assert "mlm" not in loaded.heads
    assert "not tied to the word embeddings" in caplog.text
    assert {"head.dense.weight", "decoder.weight", "decoder.bias"} <= set(loaded.summary.unused)
