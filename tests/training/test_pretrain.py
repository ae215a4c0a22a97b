"""run_pretraining: a tiny BERT learns from real tweets, interrupted runs resume, Hub modules at the end."""

import collections
import os
import re
import time

import keras
import numpy as np
import pytest

from bert_keras.training import PretrainConfig, run_pretraining
from bert_keras.training.backup import STATE_FILE, WEIGHTS_FILE
from bert_keras.training.pretrain import BACKUP_DIR
from bert_keras.text.pretraining import pretraining_dataset

TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]
TINY_CONFIG = dict(
    num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=32, dropout=0.0, attention_dropout=0.0
)


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


@pytest.fixture
def tiny_files(tmp_path):
    vocab = _write(tmp_path / "vocab.txt", "\n".join(TINY_VOCAB) + "\n")
    rng = np.random.default_rng(0)
    documents = []
    for _ in range(12):
        start = int(rng.integers(40))
        documents.append("\n".join(" ".join(f"w{(start + s * 3 + j) % 40}" for j in range(4)) for s in range(5)))
    corpus = _write(tmp_path / "corpus.txt", "\n\n".join(documents) + "\n")
    return corpus, vocab


class _Interrupt(Exception):
    pass


class _InterruptAfterEpoch(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        # The start of the next epoch: after everything of epoch `self.epoch`, its backup included (the backup
        # is the last callback of an epoch, so that it records the other callbacks' state).
        if epoch == self.epoch + 1:
            raise _Interrupt(f"interrupted after epoch {self.epoch}")


def _run(corpus, vocab, out_dir, **kwargs):
    args = dict(encoder_config=TINY_CONFIG, seq_length=16, batch_size=4, epochs=3, steps_per_epoch=4, learning_rate=1e-2, seed=7)
    args.update(kwargs)
    return run_pretraining(corpus, str(out_dir), vocab, **args)


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_step_count(tiny_files, tmp_path):
    corpus, vocab = tiny_files
    out = tmp_path / "interrupted"
    with pytest.raises(_Interrupt):
        _run(corpus, vocab, out, callbacks=[_InterruptAfterEpoch(1)])
    # Two epochs of 4 steps are backed up; nothing is exported yet.
    assert os.path.exists(out / BACKUP_DIR / "epoch-0002" / WEIGHTS_FILE)
    assert not os.path.exists(out / "encoder")

    calls = []
    resumed = _run(corpus, vocab, out, progress=lambda step, total, logs: calls.append((step, total)), progress_every=2)
    assert resumed.initial_epoch == 2
    assert resumed.steps == 12  # 3 epochs x 4 steps, as an uninterrupted run
    assert len(resumed.history.history["loss"]) == 1  # only the last epoch ran here
    assert calls == [(10, 12), (12, 12), (12, 12)]  # every 2 steps, and at the epoch's end
    assert not os.path.exists(out / BACKUP_DIR)  # deleted once training completed

    # The resumed run saw the same batches as an uninterrupted one: same weights.
    straight = _run(corpus, vocab, tmp_path / "straight", export=False)
    assert straight.steps == 12 and straight.initial_epoch == 0 and straight.encoder_dir is None
    for ours, theirs in zip(resumed.pretrainer.weights, straight.pretrainer.weights):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-5)

    # The exported encoder (with `mlm`) computes what the trained pretrainer computes.
    from bert_keras import hub

    module = hub.load(resumed.encoder_dir)
    dataset = pretraining_dataset(corpus, vocab, seq_length=16, batch_size=4, seed=1)
    features, _, _ = next(iter(dataset))
    expected = resumed.pretrainer.predict_on_batch(features)
    outputs = module.mlm(features, training=False)
    np.testing.assert_allclose(outputs["mlm_logits"].numpy(), expected["mlm_logits"], atol=1e-5)
    assert os.path.isdir(resumed.preprocess_dir)
    preprocess = hub.load(resumed.preprocess_dir)
    assert preprocess(["w1 w2"])["input_word_ids"].shape == (1, 16)


@pytest.mark.slow
def test_run_pretraining_errors(tiny_files, tmp_path):
    corpus, vocab = tiny_files
    with pytest.raises(ValueError, match="exactly one of `encoder_config`"):
        run_pretraining(corpus, str(tmp_path / "a"), vocab)
    with pytest.raises(ValueError, match="exactly one of `encoder_config`"):
        run_pretraining(corpus, str(tmp_path / "a"), vocab, encoder_config=TINY_CONFIG, preset="bert_base_en_uncased")
    # `config` is the recipe's settings (a PretrainConfig), as `finetune_classifier`'s is its FineTuneConfig.
    with pytest.raises(ValueError, match=r"expected a PretrainConfig .*pass the BertEncoder arguments as `encoder_config=`"):
        run_pretraining(corpus, str(tmp_path / "a"), vocab, config=TINY_CONFIG)
    with pytest.raises(ValueError, match="vocab_size"):
        run_pretraining(corpus, str(tmp_path / "a"), vocab, encoder_config=dict(TINY_CONFIG, vocab_size=99))
    with pytest.raises(ValueError, match="vocab_size"):
        run_pretraining(corpus, str(tmp_path / "a"), vocab, preset="bert_base_en_uncased")
    with pytest.raises(ValueError, match="seq_length"):
        run_pretraining(corpus, str(tmp_path / "a"), vocab, encoder_config=TINY_CONFIG, seq_length=64)
    with pytest.raises(ValueError, match="epochs"):
        run_pretraining(corpus, str(tmp_path / "a"), vocab, encoder_config=TINY_CONFIG, config=PretrainConfig(epochs=0))
    one_document = _write(tmp_path / "one.txt", "w1 w2\nw3 w4\n")
    with pytest.raises(ValueError, match="single document"):
        run_pretraining(one_document, str(tmp_path / "a"), vocab, encoder_config=TINY_CONFIG, seq_length=16)
    empty = _write(tmp_path / "empty.txt", "\n\n")
    with pytest.raises(ValueError, match="holds no text"):
        run_pretraining(empty, str(tmp_path / "a"), vocab, encoder_config=TINY_CONFIG, seq_length=16)
    os.makedirs(tmp_path / "done" / "encoder")
    with pytest.raises(FileExistsError, match="overwrite"):
        run_pretraining(corpus, str(tmp_path / "done"), vocab, encoder_config=TINY_CONFIG, seq_length=16)


# ---------------------------------------------------------------------------
# A tiny BERT pre-trained here on real English text.
# ---------------------------------------------------------------------------
def _tweet_corpus(path, texts):
    """One document per tweet, one sentence per line."""
    documents = []
    for text in texts:
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
        if sentences:
            documents.append("\n".join(sentences))
    return _write(path, "\n\n".join(documents) + "\n")


def _frequent_pieces(vocab, texts, path):
    """A vocabulary of the special tokens and the 4,000 pieces of `vocab` most frequent in `texts`, written to `path`.

    MiniLM's 30,522 pieces, most of which tweets never use, would make the output layer and its updates most of
    each step's work; a word with a piece outside the 4,000 becomes [UNK], as in any WordPiece vocabulary.
    """
    from bert_keras.text import WordPieceTokenizer

    pieces = open(vocab, encoding="utf-8").read().splitlines()
    counts = collections.Counter(np.asarray(WordPieceTokenizer(vocab)(texts).flat_values).tolist())
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    kept = special + [pieces[i] for i, _ in counts.most_common(4000 + len(special)) if pieces[i] not in special][:4000]
    return _write(path, "\n".join(kept) + "\n")


@pytest.mark.slow
def test_tiny_bert_pretrained_on_tweets_beats_the_unigram_baseline(tmp_path, record_property):
    from bert_keras.text import corpora

    try:
        texts, _ = corpora.load_tweets()
        vocab = corpora.minilm_vocab_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    train = _tweet_corpus(tmp_path / "train.txt", texts[:-3000])
    held_out = _tweet_corpus(tmp_path / "held_out.txt", texts[-3000:])
    vocab = _frequent_pieces(vocab, texts[:-3000], str(tmp_path / "vocab.txt"))
    config = dict(
        num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512, max_sequence_length=64,
        dropout=0.0, attention_dropout=0.0,
    )
    start = time.time()
    result = run_pretraining(
        train, str(tmp_path / "out"), vocab, encoder_config=config, seq_length=64, batch_size=32,
        max_predictions_per_seq=10, epochs=1, steps_per_epoch=400, learning_rate=1.5e-3, seed=0,
        export=False,  # the resume test checks the export
    )
    seconds = time.time() - start

    # Held-out MLM accuracy of the model, and of the best single-token guess: the most
    # frequent token among the held-out labels themselves (an upper bound for any unigram model).
    dataset = pretraining_dataset(held_out, vocab, seq_length=64, batch_size=256, max_predictions_per_seq=10, seed=1)
    correct = total = 0
    labels_seen = collections.Counter()
    for features, labels, weights in dataset:
        logits = result.pretrainer.predict_on_batch(features)["mlm_logits"]
        real = weights["mlm_logits"].numpy().astype(bool)
        truth = labels["mlm_logits"].numpy()[real]
        correct += int((logits.argmax(-1)[real] == truth).sum())
        total += int(real.sum())
        labels_seen.update(truth.tolist())
    accuracy = correct / total
    token, count = labels_seen.most_common(1)[0]
    unigram = count / total
    record_property("mlm_accuracy", accuracy)
    record_property("unigram_baseline", unigram)
    print(
        f"held-out MLM accuracy {accuracy:.4f} vs unigram baseline {unigram:.4f} (token id {token}) "
        f"over {total} predictions; {result.steps} steps in {seconds:.0f} s"
    )
    assert total >= 5000
    # Measured: 0.0805 vs 0.0453 (400 steps, 4,000 pieces, 56 s; 0.094 vs 0.053 with all 30,522); standard error about
    # 0.002. 250 steps at 2e-3 reached only 0.047: the model first learns to guess frequent pieces.
    assert accuracy >= 1.5 * unigram


@pytest.mark.slow
def test_a_backup_resumes_only_the_run_that_made_it(tiny_files, tmp_path):
    corpus, vocab = tiny_files
    out = tmp_path / "run"
    with pytest.raises(_Interrupt):
        _run(corpus, vocab, out, callbacks=[_InterruptAfterEpoch(0)])
    with pytest.raises(ValueError, match=r"backup in .*run/backup was made by a run with other steps_per_epoch \(recorded: steps_per_epoch=4\)"):
        _run(corpus, vocab, out, steps_per_epoch=5)
    with pytest.raises(ValueError, match=r"other encoder"):
        _run(corpus, vocab, out, encoder_config=dict(TINY_CONFIG, hidden_size=TINY_CONFIG["hidden_size"] * 2))
    (out / BACKUP_DIR / "epoch-0001" / STATE_FILE).write_text("")  # the snapshot, damaged after it was written
    with pytest.raises(ValueError, match=r"backup in .*run/backup is torn: .*state.json cannot be read"):
        _run(corpus, vocab, out)
    assert sorted(os.listdir(out)) == [".bert_keras_output.json", BACKUP_DIR]  # nothing was thrown away


def test_pretraining_never_takes_over_a_foreign_directory(tiny_files, tmp_path):
    corpus, vocab = tiny_files
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("x")
    with pytest.raises(FileExistsError, match=r"was not written by bert_keras \(it holds \['todo.txt'\]\)"):
        _run(corpus, vocab, mine)
    assert os.listdir(mine) == ["todo.txt"]


@pytest.mark.slow
def test_the_modules_never_replace_a_users_files_added_to_the_run(tiny_files, tmp_path):
    corpus, vocab = tiny_files
    out = tmp_path / "run"

    class AddNotes(keras.callbacks.Callback):
        def on_train_end(self, logs=None):
            (out / "notes.txt").write_text("written during the run")

    with pytest.raises(FileExistsError, match=r"holds entries this run did not write \(\['notes.txt'\]\)"):
        _run(corpus, vocab, out, epochs=1, callbacks=[AddNotes()])
    assert (out / "notes.txt").read_text() == "written during the run"
    assert sorted(os.listdir(out)) == [".bert_keras_output.json", BACKUP_DIR, "notes.txt"]  # the backup kept: a rerun resumes
