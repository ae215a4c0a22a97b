"""The family's task heads (ALBERT, DistilBERT, ELECTRA, RoBERTa) fine-tuned in transformers, through from_checkpoint.

Per architecture a tiny random transformers task model (every weight perturbed, the head's too) is saved with its
family's tokenizer files; our task on the folder must give transformers' logits on the same ids, with the config's
`id2label` names. The heads in a layout ours cannot hold (DistilBERT's and ELECTRA's sequence classifiers: two
layers on the first token) are left unread with a warning saying why, and their encoder still reads alone.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.checkpoints import load_checkpoint
from bert_keras.formats import tables
from bert_keras.tasks import BertClassifier, BertSpanLabeler, BertTokenClassifier, load_encoder_and_preprocessor
from tests.checkpoints._models import perturb_torch
from tests.test_family_workflows import FAMILIES, SEQ, WRITERS, reference_ids, tweets  # noqa: F401 (a fixture)

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

SENTIMENTS = ["negative", "neutral", "positive"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
# The tweets' edge cases for every tokenizer (accents, emoji, CJK, whitespace, empty, over-long) and a few tweets.
EDGE_CASES = ["", "  Héllo\t ``World''  ", "😀 中文字符", "word " * 40]
# family: {our head: transformers' class}, the classes whose layout is ours.
SUPPORTED = {
    "albert": {tables.CLASSIFIER: "AlbertForSequenceClassification",
               tables.TOKEN_CLASSIFIER: "AlbertForTokenClassification", tables.SPAN: "AlbertForQuestionAnswering"},
    "distilbert": {tables.TOKEN_CLASSIFIER: "DistilBertForTokenClassification",
                   tables.SPAN: "DistilBertForQuestionAnswering"},
    "electra": {tables.TOKEN_CLASSIFIER: "ElectraForTokenClassification", tables.SPAN: "ElectraForQuestionAnswering"},
    "roberta": {tables.CLASSIFIER: "RobertaForSequenceClassification",
                tables.TOKEN_CLASSIFIER: "RobertaForTokenClassification", tables.SPAN: "RobertaForQuestionAnswering"},
}
CASES = [(name, head, architecture) for name, heads in SUPPORTED.items() for head, architecture in heads.items()]
LABELS = {tables.CLASSIFIER: SENTIMENTS, tables.TOKEN_CLASSIFIER: TAGS, tables.SPAN: ["LABEL_0", "LABEL_1"]}
TASKS = {tables.CLASSIFIER: BertClassifier, tables.TOKEN_CLASSIFIER: BertTokenClassifier, tables.SPAN: BertSpanLabeler}
# family: (the class whose head is left unread, the words of its warning saying what differs).
REFUSED = {
    "distilbert": ("DistilBertForSequenceClassification", "its head is `pre_classifier` (a Linear layer and a ReLU "
                   "on the first token) then `classifier`"),
    "electra": ("ElectraForSequenceClassification", "its head (ElectraClassificationHead) is `classifier.dense` "
                "and a GELU on the first token, then `classifier.out_proj`"),
}
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def texts(tweets):  # noqa: F811 (the fixture imported above)
    return tweets[-8:] + EDGE_CASES


@pytest.fixture(scope="module")
def tokenizer_folders(tmp_path_factory, tweets):  # noqa: F811
    """kind -> (folder of the tokenizer's files, vocabulary size), trained once per kind on the tweets."""
    made = {}
    for kind, writer in WRITERS.items():
        folder = tmp_path_factory.mktemp(kind)
        made[kind] = (folder, writer(folder, tweets))
    return made


def make_task_folder(name, architecture, folder, tokenizer_folders, labels, seed=0):
    """A folder of a tiny random transformers `architecture` of family `name`, perturbed, with its tokenizer files."""
    config_class, _, config, kind, _ = FAMILIES[name]
    source, vocab_size = tokenizer_folders[kind]
    shutil.copytree(source, folder)
    torch.manual_seed(seed)
    model_config = getattr(transformers, config_class)(**config, vocab_size=vocab_size,
                                                       id2label=dict(enumerate(labels)))
    model = perturb_torch(getattr(transformers, architecture)(model_config), seed=seed, scale=0.1)
    model.save_pretrained(str(folder))
    return model, str(folder)


def transformers_logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))


# Two in the fast loop (a token head; RoBERTa's classifier read as pooler + classifier), the rest in the slow part.
@pytest.mark.parametrize("name, head, architecture", [
    case if case[2] in ("AlbertForTokenClassification", "RobertaForSequenceClassification")
    else pytest.param(*case, marks=pytest.mark.slow) for case in CASES], ids=[case[2] for case in CASES])
def test_family_task_head_gives_transformers_logits(tmp_path, tokenizer_folders, texts, name, head, architecture):
    model, folder = make_task_folder(name, architecture, tmp_path / architecture, tokenizer_folders, LABELS[head])
    ids, mask = reference_ids(name, folder, texts)
    real = mask.astype(bool)
    expected = transformers_logits(model, ids, mask)
    task = TASKS[head].from_checkpoint(folder, seq_length=SEQ)
    if head == tables.SPAN:
        # transformers scores every position: so does a labeler with context_segment_id=None, on the same ids.
        labeler = BertSpanLabeler(task.encoder, context_segment_id=None)
        labeler.span_head.set_weights(task.span_head.get_weights())
        outputs = labeler({"input_word_ids": ids.astype("int32"), "input_mask": mask.astype("int32"),
                           "input_type_ids": np.zeros_like(ids, dtype="int32")})
        diffs = [float(np.abs(np.asarray(outputs[key])[real] - getattr(expected, key).numpy()[real]).max())
                 for key in ("start_logits", "end_logits")]
    else:
        assert task.label_names == LABELS[head] and task.num_classes == len(LABELS[head])
        packed = task.preprocessor(tf.constant(texts))
        np.testing.assert_array_equal(np.asarray(packed["input_word_ids"]), ids)  # the same pieces
        outputs, reference = np.asarray(task(tf.constant(texts), training=False)), expected.logits.numpy()
        if head == tables.TOKEN_CLASSIFIER:  # read at real tokens: padding's hidden states are left at zero
            outputs, reference = outputs[real], reference[real]
        diffs = [float(np.abs(outputs - reference).max())]
    print(f"{architecture}: max abs logit difference {max(diffs):.2e}")
    assert max(diffs) <= TOLERANCE, diffs
    loaded = load_checkpoint(folder, with_heads=[head])
    assert loaded.summary.heads == [head] and loaded.summary.unused == []  # every tensor of the folder read
    assert loaded.architectures == [architecture]


def test_roberta_sequence_classifier_dense_is_read_as_the_pooler(tmp_path, tokenizer_folders):
    model, folder = make_task_folder("roberta", "RobertaForSequenceClassification", tmp_path / "roberta",
                                     tokenizer_folders, SENTIMENTS)
    loaded = load_checkpoint(folder, with_heads=[tables.CLASSIFIER])
    assert loaded.summary.not_in_checkpoint == []  # no pooler stored, none missing: the head's dense is it
    assert ("classifier.dense.weight", "encoder.pooler.kernel") in loaded.summary.loaded
    assert ("classifier.out_proj.weight", "classifier.dense.kernel") in loaded.summary.loaded
    np.testing.assert_array_equal(loaded.encoder.pooler.kernel.numpy(),
                                  model.classifier.dense.weight.detach().numpy().T)
    np.testing.assert_array_equal(loaded.heads[tables.CLASSIFIER].dense.kernel.numpy(),
                                  model.classifier.out_proj.weight.detach().numpy().T)
    assert loaded.label_names == SENTIMENTS

    # A pooler stored too (RobertaModel's, which RobertaForSequenceClassification does not run) is left unused.
    weights_file = os.path.join(folder, "model.safetensors")
    tensors = safetensors_numpy.load_file(weights_file)
    rng = np.random.default_rng(0)
    tensors["roberta.pooler.dense.weight"] = rng.normal(size=(32, 32)).astype("float32")
    tensors["roberta.pooler.dense.bias"] = rng.normal(size=(32,)).astype("float32")
    safetensors_numpy.save_file(tensors, weights_file, metadata={"format": "pt"})
    loaded = load_checkpoint(folder, with_heads=[tables.CLASSIFIER])
    assert loaded.summary.unused == ["roberta.pooler.dense.bias", "roberta.pooler.dense.weight"]
    np.testing.assert_array_equal(loaded.encoder.pooler.kernel.numpy(),
                                  model.classifier.dense.weight.detach().numpy().T)
    # Read without its head, the encoder's pooler is the stored one.
    plain = load_checkpoint(folder, with_heads=False)
    np.testing.assert_array_equal(plain.encoder.pooler.kernel.numpy(), tensors["roberta.pooler.dense.weight"].T)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "electra" else n for n in sorted(REFUSED)])
def test_sequence_classifier_of_two_layers_is_left_unread_saying_why(tmp_path, tokenizer_folders, texts, caplog, name):
    architecture, differs = REFUSED[name]
    model, folder = make_task_folder(name, architecture, tmp_path / architecture, tokenizer_folders, SENTIMENTS)
    config_file = os.path.join(folder, "config.json")
    assert json.load(open(config_file))["architectures"] == [architecture]
    # Its head is left unread, with a warning saying why; the classifier starts from the encoder with a new head.
    with caplog.at_level("WARNING", logger="bert_keras.checkpoints"):
        classifier = BertClassifier.from_checkpoint(folder, seq_length=SEQ, num_classes=len(SENTIMENTS))
    said = [r.getMessage() for r in caplog.records if r.name == "bert_keras.checkpoints"]
    assert any(f"{config_file} names {architecture}, whose head cannot be read as our 'classifier' head: {differs}"
               in message for message in said), said
    assert classifier.classifier_head.num_classes == len(SENTIMENTS)
    assert tables.CLASSIFIER not in load_checkpoint(folder, with_heads=[tables.CLASSIFIER]).heads
    caplog.clear()
    # Its encoder reads alone: transformers' hidden states on the same ids.
    encoder, _ = load_encoder_and_preprocessor(folder, seq_length=SEQ)
    ids, mask = reference_ids(name, folder, texts)
    inputs = {"input_word_ids": ids.astype("int32"), "input_mask": mask.astype("int32"),
              "input_type_ids": np.zeros_like(ids, dtype="int32")}
    with torch.no_grad():
        expected = getattr(model, model.base_model_prefix)(input_ids=torch.tensor(ids),
                                                           attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    real = mask.astype(bool)
    assert float(np.abs(np.asarray(encoder(inputs)["sequence_output"])[real] - expected[real]).max()) <= TOLERANCE
    # Another task on it: the encoder and a new head, with the usual warning naming the head left unused.
    with caplog.at_level("WARNING", logger="bert_keras.tasks"):
        BertTokenClassifier.from_checkpoint(folder, seq_length=SEQ, num_classes=3)
    warnings = [r.getMessage() for r in caplog.records if r.name == "bert_keras.tasks"]
    assert len(warnings) == 1 and f"holds a task head for {architecture} (classifier." in warnings[0]
