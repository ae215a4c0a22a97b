"""SQuAD files (v1.1, v2.0 JSON, JSONL) read and checked; exact match and F1 as the official script."""

import json

import pytest

from bert_keras.data.squad import DataError, SquadExamples, read_squad, squad_scores

CONTEXT = "Ada Lovelace wrote the first program in 1843. Café 🙂 naïve."


def _squad(qas, version="v2.0"):
    return {"version": version, "data": [{"title": "Ada", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]}


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1), encoding="utf-8")
    return str(path)


def test_squad_v1_and_v2_files_are_read(tmp_path):
    qas = [
        {"id": "q1", "question": "Who wrote it?", "answers": [{"text": "Ada Lovelace", "answer_start": 0},
                                                            {"text": "Lovelace", "answer_start": 4}]},
        {"id": "q2", "question": "Which smile?", "answers": [{"text": "🙂", "answer_start": 51}]},
        {"id": "q3", "question": "When did Babbage die?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "1843", "answer_start": 40}]},
    ]
    examples = read_squad(_write(tmp_path, "dev.json", _squad(qas)))
    assert examples.ids == ["q1", "q2", "q3"] and examples.is_impossible == [False, False, True]
    assert examples.answers[1] == [{"text": "🙂", "answer_start": 51}] and examples.contexts[2] == CONTEXT
    v1 = read_squad(_write(tmp_path, "v1.json", _squad(qas[:2], "1.1")))
    assert len(v1) == 2 and v1.subset([1]).questions == ["Which smile?"]


def test_jsonl_examples_are_read_in_both_answer_layouts(tmp_path):
    rows = [
        {"id": "a", "question": "Who?", "context": CONTEXT, "answers": [{"text": "Ada", "answer_start": 0}]},
        {"question": "When?", "context": CONTEXT, "answers": {"text": ["1843"], "answer_start": [40]}},
        {"id": "c", "question": "Why?", "context": CONTEXT, "answers": {"text": [], "answer_start": []}},
    ]
    examples = read_squad(_write(tmp_path, "train.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n"))
    assert examples.ids == ["a", "2", "c"]  # without an id, the line number
    assert examples.answers[1] == [{"text": "1843", "answer_start": 40}] and examples.is_impossible == [False, False, True]


@pytest.mark.parametrize("qa,message", [
    ({"id": "q1", "question": "Who?", "answers": [{"text": "Ada", "answer_start": 1}]},
     r"dev\.json: line 11: data\[0\]\.paragraphs\[0\]\.qas\[0\] \(id 'q1'\): answer 1 'Ada' is not at "
     r"answer_start=1: the context holds 'da ' there"),
    ({"id": "q1", "question": "Who?", "answers": [{"text": "Ada", "answer_start": 99}]},
     r"answer 1 'Ada' at answer_start=99 does not fit in the context of 59 characters"),
    ({"id": "q1", "question": " ", "answers": []}, r"\(id 'q1'\): `question` is empty"),
    ({"id": "q1", "question": "Who?", "answers": [{"text": "Ada", "answer_start": 0}], "is_impossible": True},
     r"`is_impossible` is true but the question has 1 answer"),
    ({"id": "q1", "question": "Who?", "answers": [], "is_impossible": False}, r"has no answers and `is_impossible`"),
    ({"id": "q1", "question": "Who?", "answers": [{"text": "Ada", "answer_start": "0"}]},
     r"`answer_start` holds '0'; expected a character index"),
])
def test_bad_squad_examples_name_file_line_and_id(tmp_path, qa, message):
    path = _write(tmp_path, "dev.json", _squad([qa]))
    with pytest.raises(DataError, match=message):
        read_squad(path)


def test_bad_files_are_refused_with_their_place(tmp_path):
    with pytest.raises(DataError, match=r"bad\.json: line 2 is not valid JSON \(Expecting"):
        read_squad(_write(tmp_path, "bad.json", '{"data": [\n  {"paragraphs": [}\n]}'))
    row = {"id": "x", "question": "Who?", "context": CONTEXT, "answers": [{"text": "Ada", "answer_start": 0}]}
    with pytest.raises(DataError, match=r"twice\.jsonl: line 2 \(id 'x'\): the id 'x' was already used by "
                                        r".*twice\.jsonl: line 1"):
        read_squad(_write(tmp_path, "twice.jsonl", json.dumps(row) + "\n" + json.dumps(row) + "\n"))
    with pytest.raises(DataError, match=r"nocontext\.jsonl: line 1 \(id 'x'\) has no `context`"):
        read_squad(_write(tmp_path, "nocontext.jsonl", json.dumps({"id": "x", "question": "Who?"}) + "\n"))
    (tmp_path / "latin1.json").write_bytes(b'{"data": []}\n\xe9')
    with pytest.raises(DataError, match=r"latin1\.json: line 2 is not valid UTF-8"):
        read_squad(str(tmp_path / "latin1.json"))
    with pytest.raises(DataError, match=r"empty\.json holds no question"):
        read_squad(_write(tmp_path, "empty.json", {"version": "1.1", "data": []}))
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_squad(str(tmp_path / "missing.json"))


def test_an_answer_start_of_thousands_of_digits_is_a_data_error_naming_the_file(tmp_path):
    # issue 47, item 9: Python refuses integers of over 4,300 digits with a plain ValueError, which escaped read_squad.
    digits = "1" * 5000
    squad = json.dumps(_squad([{"id": "q", "question": "Who?", "answers": [{"text": "Ada", "answer_start": 0}]}]))
    squad = squad.replace('"answer_start": 0', f'"answer_start": {digits}')
    with pytest.raises(DataError, match=r"digits\.json is not usable JSON \(Exceeds the limit \(4300 digits\)"):
        read_squad(_write(tmp_path, "digits.json", squad))
    row = json.dumps({"id": "q", "question": "Who?", "context": CONTEXT, "answers": [{"text": "Ada", "answer_start": 0}]})
    row = row.replace('"answer_start": 0', f'"answer_start": {digits}')
    for name, content in (("digits.jsonl", f"{row}\n"), ("array.json", f"[\n{row}\n]")):
        with pytest.raises(DataError, match=rf"{name}: line \d is not usable JSON \(Exceeds the limit"):
            read_squad(_write(tmp_path, name, content))


def test_scores_follow_the_official_evaluation():
    examples = SquadExamples.from_lists(
        ["Who?", "What?", "When?"], [CONTEXT] * 3,
        [[{"text": "Ada Lovelace", "answer_start": 0}], [{"text": "the first program", "answer_start": 19}], []])
    scores = squad_scores({"1": "ada lovelace!", "2": "first program in", "3": ""}, examples)
    # "the" is dropped by the normalisation: "first program in" vs "first program" -> P 2/3, R 1, F1 0.8.
    assert scores["exact_match"] == pytest.approx(200 / 3) and scores["f1"] == pytest.approx(100 * 2.8 / 3)
    assert scores["no_answer_exact_match"] == 100.0 and scores["has_answer_total"] == 2
    with pytest.raises(ValueError, match="no prediction for 1 question"):
        squad_scores({"1": "", "2": ""}, examples)
