"""Long documents through ModernBERT's tasks (issue 59): a classifier and a tagger read with `seq_length` up to the
model's positions answer a document of ~1,900 pieces in one pass as transformers does, and the classifier's export
serves it from raw strings.

The model is tests/checkpoints/test_modernbert.py's (local windows of 8 tokens) with 2,048 positions, so that the
local layers attend in bands (from `BANDED_MIN_LENGTH` tokens) and the global ones by chunks of queries.
"""

import numpy as np
import pytest

from bert_keras.layers.modernbert_block import BANDED_MIN_LENGTH, QUERY_CHUNK
from bert_keras.tasks import BertClassifier, BertTokenClassifier
from bert_keras.text.corpora import load_tweets
from tests.checkpoints.test_modernbert_heads import TAGS, task_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

POSITIONS = 2048
LABELS = {0: "negative", 1: "neutral", 2: "positive"}


@pytest.fixture(scope="module")
def document(tmp_path_factory):
    """A text of tweets joined, of 1,900 pieces or so: within the positions, past the bands' and chunks' thresholds."""
    tweets = load_tweets()[0]
    text = " ".join(tweets[:400])
    folder = tmp_path_factory.mktemp("long_tokenizer")
    task_folder(folder, "ModernBertModel", max_position_embeddings=POSITIONS)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    offsets = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]
    text = text[:offsets[1900][0]].rstrip()
    assert max(BANDED_MIN_LENGTH, 2 * QUERY_CHUNK) < len(tokenizer(text)["input_ids"]) <= POSITIONS
    return text


def _reference(model, folder, texts):
    batch = transformers.AutoTokenizer.from_pretrained(str(folder))(texts, padding=True, return_tensors="pt")
    batch.pop("token_type_ids", None)
    with torch.no_grad():
        return model(**batch).logits.numpy(), batch["attention_mask"].numpy().astype(bool)


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long_classifier")
    model = task_folder(folder, "ModernBertForSequenceClassification", max_position_embeddings=POSITIONS,
                        classifier_pooling="mean", id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    return model.eval(), folder


@pytest.mark.slow
def test_a_classifier_reads_a_long_document_in_one_pass_as_transformers(classifier_folder, document, tmp_path):
    from bert_keras.export import export_classifier, load_classifier

    model, folder = classifier_folder
    classifier = BertClassifier.from_checkpoint(str(folder), seq_length=POSITIONS, activation="softmax")
    assert classifier.preprocessor.seq_length == POSITIONS
    texts = [document, "a short one"]  # a batch of uneven lengths: the short one padded to the long one
    logits, _ = _reference(model, folder, texts)
    expected = torch.softmax(torch.tensor(logits), -1).numpy()
    assert np.abs(np.asarray(classifier(np.array(texts))) - expected).max() < 1e-4
    exported = load_classifier(export_classifier(classifier, str(tmp_path / "export")), warm_up=False)
    assert np.abs(exported.predict_proba(texts) - expected).max() < 1e-4
    assert np.abs(exported.predict_proba(texts, batch_size=1) - expected).max() < 1e-4


@pytest.mark.slow
def test_a_tagger_tags_every_piece_of_a_long_document_as_transformers(tmp_path, document):
    model = task_folder(tmp_path, "ModernBertForTokenClassification", max_position_embeddings=POSITIONS,
                        id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)}).eval()
    tagger = BertTokenClassifier.from_checkpoint(str(tmp_path), seq_length=POSITIONS)
    expected, real = _reference(model, tmp_path, [document])
    got = np.asarray(tagger(np.array([document])))[:, :expected.shape[1]]
    assert np.abs(got - expected)[real].max() < 1e-4


def test_a_seq_length_past_the_model_s_positions_is_refused(classifier_folder):
    _, folder = classifier_folder
    with pytest.raises(ValueError, match=str(POSITIONS)):
        BertClassifier.from_checkpoint(str(folder), seq_length=POSITIONS + 1)


def test_predict_proba_batches_texts_of_similar_lengths_and_keeps_their_order():
    from bert_keras.export.kinds._batches import length_batches

    # Texts past SHORT characters, longest first, each padded to less than twice its length; short ones in order.
    assert length_batches([40, 32000, 16000, 10000, 30, 35], 64) == [[1], [2, 3], [0, 4, 5]]
    assert length_batches([3000, 10, 2500, 10], 2) == [[0, 2], [1, 3]]
    assert length_batches([10, 10, 10], 2) == [[0, 1], [2]]
    assert length_batches([], 8) == []
