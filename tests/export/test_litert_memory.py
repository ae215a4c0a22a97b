"""A LiteRT tagger's memory for one long text stays flat: its windows run through the model a few at a time.

Each measurement runs in a fresh process (`python this_file.py FILE CHARACTERS WINDOWS_PER_CALL`): it loads the
file, tags a short text (every signature prepared), then one text of CHARACTERS characters, and prints the growth of
its peak resident memory over that one call (`VmHWM`, reset before it through `/proc/self/clear_refs`; not
`ru_maxrss`, which keeps the peak of the parent the process was forked from).
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ai_edge_litert")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
ALL_AT_ONCE = 1 << 20  # windows per call: every window of a text in one call, as files before `windows` ran them


def long_text(characters):
    """Words of one piece each ("w5 w12 ..."), about `characters` characters."""
    words, size = [], 0
    while size < characters:
        words.append(f"w{(len(words) * 7) % 30 + 5}")
        size += len(words[-1]) + 1
    return " ".join(words)


def peak_growth(path, characters, windows_per_call):
    """Peak RSS growth in MiB of tagging one text of `characters` characters, measured in a fresh process."""
    result = subprocess.run([sys.executable, __file__, path, str(characters), str(windows_per_call)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _memory_mib(field):
    """`VmRSS` (now) or `VmHWM` (the peak since the last reset) of this process, in MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024  # kB


def _measure(path, characters, windows_per_call):
    from bert_keras.export import load_litert

    tagger = load_litert(path, windows_per_call=windows_per_call)
    tagger.tag_pieces(long_text(2000))  # several windows: every signature prepared
    text = long_text(characters)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) back to the present
    before = _memory_mib("VmRSS")
    pieces = tagger.tag_pieces(text)[0]
    return {"growth_mib": _memory_mib("VmHWM") - before, "before_mib": before, "windows": int(pieces["window"][-1]) + 1}


@pytest.fixture(scope="module")
def tagger_file(tmp_path_factory):
    from bert_keras import BertEncoder
    from bert_keras.export import export_litert, export_tagger
    from bert_keras.tasks import BertTokenClassifier
    from bert_keras.text import BertPreprocessor

    root = tmp_path_factory.mktemp("litert_memory")
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=16, num_heads=4, intermediate_size=64,
                          max_sequence_length=64)
    model = BertTokenClassifier(encoder, num_classes=len(TAGS), preprocessor=BertPreprocessor(VOCAB, seq_length=64))
    export_dir = export_tagger(model, str(root / "ner"), tag_names=TAGS, stride=16)
    return export_litert(export_dir, str(root / "ner.tflite"))


@pytest.mark.slow  # a conversion, and three processes that load its file
def test_a_litert_taggers_memory_for_one_text_does_not_grow_with_its_length(tagger_file):
    # Issue 55 item 6: a LiteRT tagger ran all windows of one text in one call (a 400 KB line: 3.5 GB).
    small = peak_growth(tagger_file, 20_000, 64)
    large = peak_growth(tagger_file, 80_000, 64)
    assert large["windows"] > 4 * 64 and small["windows"] > 64, (small, large)  # both lengths make several calls
    assert large["growth_mib"] < 1.5 * small["growth_mib"] + 20, (small, large)
    at_once = peak_growth(tagger_file, 80_000, ALL_AT_ONCE)  # the measurement sees what one call of them all holds
    assert at_once["growth_mib"] > 2 * large["growth_mib"], (large, at_once)


if __name__ == "__main__":
    print(json.dumps(_measure(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
