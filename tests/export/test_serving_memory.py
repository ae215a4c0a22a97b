"""Memory for one long text stays flat: a reader's context and a tagger's text served a few windows at a time.

Each measurement runs in a fresh process (`python this_file.py KIND EXPORT_DIR CHARACTERS`): it loads the export,
answers a short input (every function traced), then one input of CHARACTERS characters, and prints the growth of
its peak resident memory over that one call (`ru_maxrss`, which only grows: one process per length).
"""

import json
import os
import resource
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]


def long_text(characters):
    """Words of one piece each ("w5 w17 ..."), about `characters` characters."""
    words, size = [], 0
    for i in range(characters):
        word = f"w{(i * 7) % 30 + 5}"
        words.append(word)
        size += len(word) + 1
        if size >= characters:
            break
    return " ".join(words)


def peak_growth(kind, export_dir, characters):
    """Peak RSS growth in MiB of serving one text of `characters` characters, measured in a fresh process."""
    result = subprocess.run([sys.executable, __file__, kind, export_dir, str(characters)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _maxrss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _measure(kind, export_dir, characters):
    text = long_text(characters)
    if kind == "reader":
        from bert_keras.export import load_reader

        reader = load_reader(export_dir, warm_up=False)
        reader.predict(question="w1 w2", context=long_text(3000), top_k=3)  # traced, a few windows
        before = _maxrss_mib()
        answers = reader.predict(question="w1 w2", context=text, top_k=3)
        assert len(answers) == 3 and all(text[a["start"] : a["end"]] == a["answer"] for a in answers)
    else:
        from bert_keras.export import load_tagger

        tagger = load_tagger(export_dir, warm_up=False)
        tagger.predict(long_text(3000))
        before = _maxrss_mib()
        tagger.predict(text)
    return {"growth_mib": _maxrss_mib() - before, "before_mib": before}


@pytest.fixture(scope="module")
def reader_dir(tmp_path_factory):
    from bert_keras import BertEncoder
    from bert_keras.export import export_reader
    from bert_keras.tasks import BertSpanLabeler
    from bert_keras.text import BertPreprocessor

    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=512)
    labeler = BertSpanLabeler(encoder, preprocessor=BertPreprocessor(VOCAB, seq_length=384))
    return export_reader(labeler, str(tmp_path_factory.mktemp("memory") / "reader"))  # 384 pieces, stride 128


@pytest.mark.slow  # an export, and two processes that load it
def test_a_readers_memory_for_one_context_does_not_grow_with_its_length(reader_dir):
    # Issue 55 item 6: a reader read all windows of one context at once (1 MB: +0.65 GB).
    # 100 KB: 25,000 pieces, about 100 windows of 384 (more than one call's 64); 400 KB: about 400.
    small = peak_growth("reader", reader_dir, 100_000)
    large = peak_growth("reader", reader_dir, 400_000)
    assert large["growth_mib"] < 1.5 * small["growth_mib"] + 20, (small, large)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    print(json.dumps(_measure(sys.argv[1], sys.argv[2], int(sys.argv[3]))))


@pytest.fixture(scope="module")
def tagger_dir(tmp_path_factory):
    from bert_keras import BertEncoder
    from bert_keras.export import export_tagger
    from bert_keras.tasks import BertTokenClassifier
    from bert_keras.text import BertPreprocessor

    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=512)
    tagger = BertTokenClassifier(encoder, num_classes=3, preprocessor=BertPreprocessor(VOCAB, seq_length=512))
    return export_tagger(tagger, str(tmp_path_factory.mktemp("memory") / "tagger"), tag_names=["O", "B-X", "I-X"])


@pytest.mark.slow  # an export, and two processes that load it
def test_a_taggers_memory_for_one_text_grows_only_by_its_pieces_outputs(tagger_dir):
    # Issue 55 item 6: the windows ran 64 per call, but calls side by side (the loop's parallel iterations), each
    # holding its activations. One call at a time, what grows is one entry per piece (its tag scores, offsets and
    # token: a few hundred bytes), not the model's activations.
    # 100 KB: 25,000 pieces, about 66 windows of 512 (more than one call's 64); 400 KB: about 260.
    small = peak_growth("tagger", tagger_dir, 100_000)
    large = peak_growth("tagger", tagger_dir, 400_000)
    assert large["growth_mib"] < 1.5 * small["growth_mib"] + 20, (small, large)
