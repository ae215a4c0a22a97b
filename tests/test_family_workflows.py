"""BERT's family through the workflows: raw strings in, each family's own tokenizer from its folder.

Per family a tiny random transformers model is saved with its tokenizer's files, the tokenizer trained here on
tweets: WordPiece (`vocab.txt`) for BERT, ELECTRA and DistilBERT, SentencePiece (`spiece.model`) for ALBERT,
byte-level BPE (`vocab.json`, `merges.txt`) for RoBERTa, a Unigram `tokenizer.json` (trained with the `tokenizers`
library, saved by transformers' XLMRobertaTokenizerFast) for XLM-RoBERTa. The reference is transformers' model fed
transformers' tokenizer's ids on the same strings; for ALBERT the ids are ALBERT's own definition (its text
preprocessing, then the `sentencepiece` library, `[CLS] ... [SEP]`): transformers 5 cannot read a `spiece.model` here
(tests/text/test_sentencepiece.py); for XLM-RoBERTa the `tokenizers` library's on its tokenizer.json (literal special
tokens read as text), `<s> ... </s>`.
"""

import io
import json
import os
import pathlib
import shutil
import sys
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import cli, hub
from bert_keras.data.texts import LabelledText
from bert_keras.export import load_classifier
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.tasks import BertClassifier, load_encoder_and_preprocessor
from bert_keras.text.corpora import load_tweets
from bert_keras.training import finetune_classifier
from tests.checkpoints._models import perturb_torch
from tests.text.test_sentencepiece import albert_reference_text

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")
spm = pytest.importorskip("sentencepiece")

SEQ = 24
_SIZES = dict(num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=SEQ)
# name: (config class, model class, config, tokenizer kind, whether the model takes token types)
FAMILIES = {
    "electra": ("ElectraConfig", "ElectraModel", dict(_SIZES, embedding_size=16, hidden_size=32), "wordpiece", True),
    "distilbert": ("DistilBertConfig", "DistilBertModel",
                   dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=SEQ), "wordpiece", False),
    "albert": ("AlbertConfig", "AlbertModel", dict(_SIZES, embedding_size=16, hidden_size=32), "sentencepiece", True),
    "roberta": ("RobertaConfig", "RobertaModel",
                dict(_SIZES, hidden_size=32, max_position_embeddings=SEQ + 2, type_vocab_size=1, pad_token_id=1),
                "byte_bpe", False),
    # As the real checkpoints: 2 padding positions, layer_norm_eps 1e-5.
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaModel",
                    dict(_SIZES, hidden_size=32, max_position_embeddings=SEQ + 2, type_vocab_size=1, pad_token_id=1,
                         layer_norm_eps=1e-5), "unigram", False),
}
# Tweets, and the edge cases of every tokenizer: accents, emoji, CJK, control characters, whitespace runs, empty,
# over-long (truncated to SEQ).
EDGE_CASES = ["", "  Héllo\t ``World''  ", "😀 👨\u200d👩\u200d👧 中文字符", "x\x01y \u200b z", "word " * 40]


@pytest.fixture(scope="module")
def tweets():
    try:
        return [text.decode("utf-8", errors="replace") for text in load_tweets(raw=True)[0]]
    except FileNotFoundError as error:  # the test extra installs them
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def texts(tweets):
    return tweets[-24:] + EDGE_CASES


def _train_wordpiece(folder, tweets):
    trainer = tokenizers.BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(tweets[:3000], vocab_size=600, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                                             "[MASK]"], show_progress=False)
    trainer.save_model(str(folder))
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return trainer.get_vocab_size()


def _write_sentencepiece(folder, tweets):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([albert_reference_text(t) for t in tweets[:3000] if t.strip()]), model_writer=model,
        vocab_size=600, model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], character_coverage=0.9995, minloglevel=2, num_threads=1,
    )
    (folder / "spiece.model").write_bytes(model.getvalue())
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "keep_accents": False}))
    return 600


def _train_byte_bpe(folder, tweets):
    trainer = tokenizers.ByteLevelBPETokenizer()
    trainer.train_from_iterator(tweets[:3000], vocab_size=600, min_frequency=2,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
    trainer.save_model(str(folder))
    return trainer.get_vocab_size()


# Accents (composed and combining), emoji (ZWJ sequences, flags), CJK: the XLM-RoBERTa tokenizer learns them too.
ACCENTED = ["Héllo wörld, ça va très bien à Zürich 😀", "naïve café crème brûlée 👍🏽 🇫🇷", "Ünïcödé e\u0301te\u0300",
            "mañana señor 👨\u200d👩\u200d👧 ok", "日本語 中文字符 한국어 😂😂", "ΟΔΟΣ İstanbul ǅ ﬁne"]


def _train_unigram(folder, tweets, size=600):
    """XLM-RoBERTa's kind: a Unigram model trained by the `tokenizers` library (WhitespaceSplit + Metaspace) on tweets
    and accented texts, saved by transformers' XLMRobertaTokenizerFast in fairseq's id layout (`<s> <pad> </s> <unk>`,
    the pieces, `<mask>` last): tokenizer.json and tokenizer_config.json only. Returns the vocabulary size."""
    model = tokenizers.Tokenizer(tokenizers.models.Unigram())
    model.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([tokenizers.pre_tokenizers.WhitespaceSplit(),
                                                              tokenizers.pre_tokenizers.Metaspace()])
    trainer = tokenizers.trainers.UnigramTrainer(vocab_size=size, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                 unk_token="<unk>", show_progress=False)
    model.train_from_iterator(tweets[:3000] + ACCENTED * 20, trainer)
    pieces = [tuple(entry) for entry in json.loads(model.to_str())["model"]["vocab"]] + [("<mask>", 0.0)]
    transformers.XLMRobertaTokenizerFast(vocab=pieces).save_pretrained(str(folder))
    return len(pieces)


def unigram_reference(folder):
    """transformers' XLM-RoBERTa tokenizer of the folder (its `tokenizers` model, built from the tokenizer.json that
    Python reads: `bert_keras.text.tokenizer_json.unigram_scores`), literal special tokens read as text (as ours)."""
    reference = transformers.AutoTokenizer.from_pretrained(folder).backend_tokenizer
    reference.encode_special_tokens = True
    return reference


# The `tokenizers` library's trainers (WordPiece, byte-level BPE, Unigram) break ties between equal counts in hash
# order, which differs from process to process: each run trained other vocabularies, so other tiny models and other
# near-ties (4 trainings, 4 vocabularies; a DistilBERT tagger's entity flipped in one CI run of 2026-12-07). Their
# files, trained once by `TRAINERS` on the first 3,000 tweets, are kept in tests/tokenizer_files/<kind>/ (ModernBERT's
# BPE too: tests/checkpoints/test_modernbert.py), so every run tests the same vocabularies.
# `python -m tests.test_family_workflows [kind ...]` trains and keeps new ones; BERT_KERAS_TEST_TRAIN_TOKENIZERS=1
# trains new ones in every test process instead (a search for vocabularies that break parity). SentencePiece's
# trainer, on one thread, gives the same model every time: ALBERT's is trained here.
TOKENIZER_FILES = pathlib.Path(__file__).resolve().parent / "tokenizer_files"


def _train_modernbert_bpe(folder, tweets):
    """ModernBERT's kind: byte-level BPE without a prefix space, 400 tokens, trained on the first 3,000 tweets as read
    by `load_tweets()`; `vocab.json` and `merges.txt` (tests/checkpoints/test_modernbert.py's
    `save_modernbert_tokenizer` adds the special tokens, the normalizer and the post-processor)."""
    trainer = tokenizers.ByteLevelBPETokenizer(add_prefix_space=False)
    trainer.train_from_iterator(load_tweets()[0][:3000], vocab_size=400, min_frequency=2, show_progress=False)
    trainer.save_model(str(folder))
    return trainer.get_vocab_size()


TRAINERS = {"wordpiece": _train_wordpiece, "byte_bpe": _train_byte_bpe, "unigram": _train_unigram,
            "modernbert_bpe": _train_modernbert_bpe}
_KEPT_SIZES = {  # the vocabulary size of each kind's kept files
    "wordpiece": lambda kept: len((kept / "vocab.txt").read_text("utf-8").splitlines()),
    "byte_bpe": lambda kept: len(json.loads((kept / "vocab.json").read_text("utf-8"))),
    "modernbert_bpe": lambda kept: len(json.loads((kept / "vocab.json").read_text("utf-8"))),
    "unigram": lambda kept: len(json.loads((kept / "tokenizer.json").read_text("utf-8"))["model"]["vocab"]),
}


def kept_tokenizer_files(kind, tweets=None):
    """The folder of `kind`'s tokenizer files: the kept one, or with BERT_KERAS_TEST_TRAIN_TOKENIZERS set, a new one
    trained on `tweets` (the raw tweets, decoded, when None)."""
    if not os.environ.get("BERT_KERAS_TEST_TRAIN_TOKENIZERS"):
        return TOKENIZER_FILES / kind
    folder = pathlib.Path(tempfile.mkdtemp(prefix=f"{kind}_"))
    TRAINERS[kind](folder, _raw_tweets() if tweets is None else tweets)
    return folder


def _raw_tweets():
    return [text.decode("utf-8", errors="replace") for text in load_tweets(raw=True)[0]]


def _kept_writer(kind):
    def write(folder, tweets):
        kept = kept_tokenizer_files(kind, tweets)
        for file in sorted(kept.iterdir()):
            shutil.copyfile(file, pathlib.Path(folder) / file.name)
        return _KEPT_SIZES[kind](kept)

    write.__doc__ = f"The kept {kind} tokenizer's files (`TOKENIZER_FILES`) into `folder`; its vocabulary size."
    return write


write_unigram_tokenizer = _kept_writer("unigram")
WRITERS = {"wordpiece": _kept_writer("wordpiece"), "sentencepiece": _write_sentencepiece,
           "byte_bpe": _kept_writer("byte_bpe"), "unigram": write_unigram_tokenizer}


def keep_new_tokenizer_files(kinds=tuple(TRAINERS)):
    """Trains `kinds` again on the first 3,000 tweets and keeps their files in `TOKENIZER_FILES` (the tests' data)."""
    tweets = _raw_tweets()
    for kind in kinds:
        kept = TOKENIZER_FILES / kind
        shutil.rmtree(kept, ignore_errors=True)
        kept.mkdir(parents=True)
        print(kind, TRAINERS[kind](kept, tweets), "pieces in", kept)


def make_family_folder(name, folder, tweets, seed=0):
    """A Hugging Face folder of family `name`: a tiny random model and its tokenizer's files. Returns the model."""
    config_class, model_class, config, kind, _ = FAMILIES[name]
    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = WRITERS[kind](folder, tweets)
    torch.manual_seed(seed)
    model = perturb_torch(getattr(transformers, model_class)(getattr(transformers, config_class)(
        **config, vocab_size=vocab_size)), seed=seed)
    model.save_pretrained(str(folder))
    return model


def reference_ids(name, folder, texts):
    """The ids of the family's reference tokenizer on `texts`: `(input_ids, attention_mask)`, padded to SEQ."""
    kind = FAMILIES[name][3]
    if kind == "sentencepiece":  # ALBERT's definition: its preprocessing, sentencepiece, [CLS] ... [SEP]
        processor = spm.SentencePieceProcessor(model_file=os.path.join(folder, "spiece.model"))
        rows = [[2] + processor.encode(albert_reference_text(t), out_type=int)[: SEQ - 2] + [3] for t in texts]
        ids = np.array([row + [0] * (SEQ - len(row)) for row in rows])
        return ids, (np.arange(SEQ)[None, :] < np.array([[len(row)] for row in rows])).astype("int64")
    if kind == "unigram":  # XLM-RoBERTa: <s> ... </s>, padded with <pad> (1)
        rows = [[0] + e.ids[: SEQ - 2] + [2] for e in unigram_reference(folder).encode_batch(
            texts, add_special_tokens=False)]
        ids = np.array([row + [1] * (SEQ - len(row)) for row in rows])
        return ids, (np.arange(SEQ)[None, :] < np.array([[len(row)] for row in rows])).astype("int64")
    if kind == "wordpiece":
        reference = transformers.BertTokenizerFast(vocab=os.path.join(folder, "vocab.txt"), do_lower_case=True)
    else:
        reference = transformers.RobertaTokenizerFast.from_pretrained(str(folder))
    out = reference(texts, padding="max_length", truncation=True, max_length=SEQ, split_special_tokens=True)
    return np.array(out["input_ids"]), np.array(out["attention_mask"])


def reference_outputs(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()


def mean_pool(sequence, mask):
    mask = np.asarray(mask, "float64")[..., None]
    return (np.asarray(sequence, "float64") * mask).sum(1) / mask.sum(1)


@pytest.fixture(scope="module")
def families(tmp_path_factory, tweets):
    """name -> (transformers model, folder)."""
    built = {}
    for name in FAMILIES:
        folder = tmp_path_factory.mktemp(name)
        built[name] = (make_family_folder(name, folder, tweets), str(folder))
    return built


@pytest.fixture(scope="module")
def classifiers(families):
    """name -> `BertClassifier.from_checkpoint` of the family's folder, made on first use: the parity test reads its
    preprocessor and encoder, the convert test its encoder; neither changes it (it was read once per test)."""
    built = {}

    def get(name):
        if name not in built:
            built[name] = BertClassifier.from_checkpoint(families[name][1], num_classes=2, seq_length=SEQ)
        return built[name]

    return get


PARITY = {}


@pytest.mark.slow  # 4 s in the full run of 450d6b9
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_raw_strings_through_from_checkpoint_match_transformers(families, classifiers, texts, name):
    model, folder = families[name]
    classifier = classifiers(name)
    assert type(classifier.preprocessor.tokenizer).__name__ == {
        "wordpiece": "WordPieceTokenizer", "sentencepiece": "SentencePieceTokenizer", "byte_bpe": "BytePairTokenizer",
        "unigram": "UnigramTokenizer",
    }[FAMILIES[name][3]]
    packed = classifier.preprocessor(np.array(texts))
    ids, mask = reference_ids(name, folder, texts)
    np.testing.assert_array_equal(packed["input_word_ids"], ids)
    np.testing.assert_array_equal(packed["input_mask"], mask)
    np.testing.assert_array_equal(packed["input_type_ids"], np.zeros_like(ids))
    sequence = np.asarray(classifier.encoder(packed)["sequence_output"])
    expected = reference_outputs(model, ids, mask)
    real = mask.astype(bool)
    diff = float(np.abs(sequence[real] - expected[real]).max())
    pooled_diff = float(np.abs(mean_pool(sequence, mask) - mean_pool(expected, mask)).max())
    PARITY[name] = (diff, pooled_diff)
    assert diff < 1e-5 and pooled_diff < 1e-5, (diff, pooled_diff)


@pytest.mark.slow  # 3 s in the full run of 450d6b9
def test_roberta_pairs_are_packed_roberta_s_way(families):
    _, folder = families["roberta"]
    _, preprocessor = load_encoder_and_preprocessor(folder, seq_length=SEQ)
    reference = transformers.RobertaTokenizerFast.from_pretrained(folder)
    first, second = ["good morning all", "a"], ["see you", "b c d"]
    expected = reference(first, second, padding="max_length", max_length=SEQ)["input_ids"]
    packed = preprocessor([np.array(first), np.array(second)])
    np.testing.assert_array_equal(packed["input_word_ids"], expected)  # <s> A </s></s> B </s>
    np.testing.assert_array_equal(packed["input_type_ids"], np.zeros((2, SEQ)))


@pytest.mark.parametrize("name, missing", [("albert", "spiece.model"), ("roberta", "merges.txt"),
                                           ("electra", "vocab.txt")])
def test_a_folder_without_its_tokenizer_files_is_refused_naming_them(families, tmp_path, name, missing):
    _, folder = families[name]
    copy = tmp_path / name
    copy.mkdir()
    for file in os.listdir(folder):
        if file != missing:
            os.link(os.path.join(folder, file), copy / file)
    with pytest.raises(ValueError, match=f"The checkpoint at '{copy}' has no {missing}, which its "
                                         f"{FAMILIES[name][3]} tokenizer is read from"):
        BertClassifier.from_checkpoint(str(copy), num_classes=2, seq_length=SEQ)


# The assets each family's modules carry (TF Hub's attribute names: `vocab_file`, ALBERT's `sp_model_file`).
MODULE_ASSETS = {"wordpiece": ["vocab.txt"], "sentencepiece": ["spiece.model"], "byte_bpe": ["merges.txt", "vocab.json"],
                 "unigram": ["unigram.model"]}


@pytest.mark.slow  # 9-14 s each: a module pair written and loaded
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_convert_writes_a_module_pair_that_hub_layers_run_as_the_encoder(families, classifiers, texts, tmp_path, capsys,
                                                                         name):
    model, folder = families[name]
    out = str(tmp_path / "modules")
    assert cli.main(["convert", folder, "--out", out, "--seq-length", str(SEQ)]) == 0
    for module in ("encoder", "preprocess"):
        assert sorted(os.listdir(os.path.join(out, module, "assets"))) == MODULE_ASSETS[FAMILIES[name][3]]
    preprocess = hub.load(os.path.join(out, "preprocess"))
    ids, mask = reference_ids(name, folder, texts)
    # TF Hub's interface: tokenize, then bert_pack_inputs (RoBERTa's <s> A </s></s> B </s> for pairs).
    segments = [preprocess.tokenize(tf.constant(texts)), preprocess.tokenize(tf.constant(texts[::-1]))]
    packed = preprocess.bert_pack_inputs(segments[:1], seq_length=tf.constant(SEQ))
    np.testing.assert_array_equal(packed["input_word_ids"], ids)
    pairs = preprocess.bert_pack_inputs(segments, seq_length=tf.constant(SEQ))
    _, in_memory = load_encoder_and_preprocessor(folder, seq_length=SEQ)
    np.testing.assert_array_equal(pairs["input_word_ids"],
                                  in_memory([np.array(texts), np.array(texts[::-1])])["input_word_ids"])
    assert int(preprocess.tokenize.get_special_tokens_dict()["padding_id"]) == FAMILIES[name][2].get("pad_token_id", 0)
    # hub.KerasLayer / hub.PreprocessLayer on the pair: the in-memory encoder's outputs.
    layer_inputs = hub.PreprocessLayer(os.path.join(out, "preprocess"), seq_length=SEQ)(tf.constant(texts))
    outputs = hub.KerasLayer(os.path.join(out, "encoder"))(layer_inputs)
    expected = classifiers(name).encoder(layer_inputs)
    for key in ("sequence_output", "pooled_output"):
        assert float(np.abs(np.asarray(outputs[key]) - np.asarray(expected[key])).max()) < 1e-5, key
    real = mask.astype(bool)
    assert float(np.abs(np.asarray(outputs["sequence_output"])[real] - reference_outputs(model, ids, mask)[real]).max()) < 1e-5


@pytest.mark.slow  # a fine-tune, an export and its reload per family
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_finetune_export_and_load_classifier(families, tweets, tmp_path, name):
    _, folder = families[name]
    texts = tweets[:32]
    labels = np.array([int("!" in text) for text in texts])
    train = LabelledText(texts=texts, labels=labels, label_names=["calm", "loud"])
    export_dir = str(tmp_path / "classifier")
    result = finetune_classifier(folder, train, validation=train, export_dir=export_dir, seq_length=SEQ,
                                 batch_size=16, head_epochs=1, epochs=1, verbose=0, report=lambda line: None)
    assert result.export_dir == export_dir
    probe = ["good morning 😀!", "Héllo ``World''", "中文字符 x\x01y"]
    predictions = load_classifier(export_dir, warm_up=False).predict(probe)  # no warm-up competing for the cores
    # The export tokenizes as the family does: its probabilities are the fine-tuned model's on the same strings.
    expected = np.asarray(keras.ops.softmax(result.model.predict(np.array(probe), verbose=0)))
    served = np.array([[p["scores"][label] for label in ("calm", "loud")] for p in predictions])
    assert float(np.abs(served - expected).max()) < 1e-5
    assert [p["label"] for p in predictions] == [("calm", "loud")[i] for i in expected.argmax(1)]


@pytest.mark.slow  # 4 s in the full run of 450d6b9
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_sentence_encoder_mean_pooling_matches_transformers(families, texts, name):
    model, folder = families[name]
    sentence_encoder = SentenceEncoder.from_checkpoint(folder, pooling="mean", max_seq_length=SEQ)
    embeddings = np.asarray(sentence_encoder.encode(texts))
    ids, mask = reference_ids(name, folder, texts)
    expected = mean_pool(reference_outputs(model, ids, mask), mask)
    diff = float(np.abs(embeddings - expected).max())
    PARITY[name + "_sentence"] = diff
    assert embeddings.shape == (len(texts), 32) and diff < 1e-5, diff


if __name__ == "__main__":
    keep_new_tokenizer_files(sys.argv[1:] or tuple(TRAINERS))
