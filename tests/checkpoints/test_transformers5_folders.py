"""Model folders as transformers 5 saves them (weights, config.json, tokenizer.json, tokenizer_config.json: no
vocab.json, merges.txt or spiece.model) through a task's `from_checkpoint`: transformers' ids and logits, and the
checkpoint's own maximum length by default for a token head read from it."""

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.tasks import BertClassifier, BertTokenClassifier
from tests.checkpoints._models import perturb_torch
from tests.test_family_workflows import FAMILIES, SEQ, tweets  # noqa: F401 (a fixture)
from tests.text.test_tokenizer_json import save_transformers_tokenizer

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TAGS = ["O", "B-PER", "I-PER"]
EDGE_CASES = ["", "  Héllo\t ``World''  ", "😀 中文字符", "word " * 40]
ARCHITECTURES = {"albert": "AlbertForTokenClassification", "roberta": "RobertaForTokenClassification"}


def make_folder(name, folder, tweets, model_max_length=None):  # noqa: F811
    save_transformers_tokenizer(name, folder, tweets, size=300)
    if model_max_length is not None:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps(dict(config, model_max_length=model_max_length)))
    config_class, _, config, _, _ = FAMILIES[name]
    torch.manual_seed(0)
    model_config = getattr(transformers, config_class)(**config, vocab_size=300, id2label=dict(enumerate(TAGS)))
    model = perturb_torch(getattr(transformers, ARCHITECTURES[name])(model_config), seed=0, scale=0.1)
    model.save_pretrained(str(folder))
    return model


@pytest.mark.slow  # 5 s in the full run of 450d6b9
@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_tokenizer_json_folder_gives_transformers_logits_at_its_own_length(tmp_path, tweets, name):  # noqa: F811
    model = make_folder(name, tmp_path, tweets)
    assert not {"vocab.json", "merges.txt", "spiece.model"} & {p.name for p in tmp_path.iterdir()}
    texts = tweets[-6:] + EDGE_CASES
    tagger = BertTokenClassifier.from_checkpoint(str(tmp_path))
    # model_max_length is transformers' "unknown" (10**30): the encoder's positions (RoBERTa's less its 2 offsets).
    assert tagger.preprocessor.seq_length == SEQ == tagger.encoder.max_sequence_length
    reference = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    expected = reference(texts, padding="max_length", truncation=True, max_length=SEQ, split_special_tokens=True)
    ids, mask = np.array(expected["input_ids"]), np.array(expected["attention_mask"])
    packed = tagger.preprocessor(tf.constant(texts))
    np.testing.assert_array_equal(np.asarray(packed["input_word_ids"]), ids)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    ours = np.asarray(tagger(tf.constant(texts), training=False))
    real = mask.astype(bool)
    assert float(np.abs(ours[real] - logits[real]).max()) <= 1e-5


@pytest.mark.slow
def test_default_length_is_the_tokenizer_configs_model_max_length_when_sane(tmp_path, tweets):  # noqa: F811
    make_folder("albert", tmp_path, tweets)
    config_file = tmp_path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())

    def default_length(model_max_length, task=BertTokenClassifier, **kwargs):
        config_file.write_text(json.dumps(dict(config, model_max_length=model_max_length)))
        return task.from_checkpoint(str(tmp_path), **kwargs).preprocessor.seq_length

    assert default_length(16) == 16
    # An explicit length stays; a classifier keeps 128, cut to the encoder's positions.
    assert default_length(16, seq_length=8) == 8
    assert default_length(16, BertClassifier, num_classes=2) == SEQ
    for value in (10**30, "512", True, 2, SEQ + 1):  # unknown, not an integer, too short, too long: the positions
        assert default_length(value) == SEQ, value
