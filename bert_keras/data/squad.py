"""Extractive question answering data: SQuAD v1.1 / v2.0 files and JSONL, checked; SQuAD's exact match and F1.

`read_squad` reads SQuAD's nested JSON (`{"data": [{"paragraphs": [{"context",
"qas": [{"id", "question", "answers", "is_impossible"}]}]}]}`) or one example
per line of JSONL (`{"id", "question", "context", "answers"}`, the answers as
SQuAD's list of `{"text", "answer_start"}` or as Hugging Face datasets'
`{"text": [...], "answer_start": [...]}`) into `SquadExamples`. Every answer
is checked against its context (`context[start:start + len(text)] == text`);
an error is a `DataError` naming the file, the line and the example.
`squad_scores` is the official evaluation script's exact match and F1 (v2.0's,
which reads v1.1 the same way).

Like `bert_keras.data.texts`, this module imports no TensorFlow, so the command
line checks a file before TensorFlow loads.
"""

import collections
import dataclasses
import json
import os
import re
import string

from bert_keras.data._records import DataError, _check_no_surrogate, _json_array, _json_kind, decoded_lines, open_file, place

__all__ = ["DataError", "SquadExamples", "read_squad", "squad_scores"]

FORMATS = {".jsonl": "jsonl"}
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


@dataclasses.dataclass
class SquadExamples:
    """Questions, their contexts and answers, as read by `read_squad` (or built by `from_lists`).

    Attributes:
        ids: list of str, unique.
        questions: list of str.
        contexts: list of str.
        answers: list of lists of `{"text": str, "answer_start": int}`; the
            answer is `context[answer_start:answer_start + len(text)]`. Empty
            for an unanswerable question. Training uses the first answer (as
            transformers' `run_qa.py`); evaluation takes the best of them.
        is_impossible: list of bool (SQuAD v2.0's unanswerable questions).
    """

    ids: list
    questions: list
    contexts: list
    answers: list
    is_impossible: list

    def __len__(self):
        return len(self.ids)

    def subset(self, indices):
        """The examples at `indices` (e.g. one part of a split)."""
        indices = [int(i) for i in indices]
        return SquadExamples(*([column[i] for i in indices] for column in _columns(self)))

    @classmethod
    def from_lists(cls, questions, contexts, answers=None, ids=None):
        """Checks Python lists as `read_squad` checks a file; errors name the example (`example 3`).

        >>> examples = SquadExamples.from_lists(["Who wrote?"], ["Ada wrote."], [[{"text": "Ada", "answer_start": 0}]])
        >>> examples.ids, examples.is_impossible
        (['1'], [False])
        """
        questions, contexts = list(questions), list(contexts)
        answers = [[] for _ in questions] if answers is None else list(answers)
        ids = [str(i + 1) for i in range(len(questions))] if ids is None else [str(i) for i in ids]
        if not len(questions) == len(contexts) == len(answers) == len(ids):
            raise ValueError(f"Received {len(questions)} questions, {len(contexts)} contexts, {len(answers)} answer "
                             f"lists and {len(ids)} ids; expected as many of each.")
        builder = _Builder("the examples")
        for i, (question, context, answer) in enumerate(zip(questions, contexts, answers)):
            record = {"id": ids[i], "question": question, "context": context, "answers": answer}
            builder.add(record, f"example {i + 1}", default_id=ids[i])
        return builder.examples()


class _Builder:
    """Collects checked examples; `where` names each in messages."""

    def __init__(self, name):
        self.name = name
        self.columns = SquadExamples([], [], [], [], [])
        self.first_place = {}

    def add(self, record, where, default_id, context=None):
        qid = record.get("id", default_id)
        if isinstance(qid, int) and not isinstance(qid, bool):
            qid = str(qid)
        if not isinstance(qid, str) or not qid:
            raise DataError(f"{where}: `id` holds {_describe(qid)}; expected a non-empty string.")
        where = f"{where} (id {qid!r})"
        if qid in self.first_place:
            raise DataError(f"{where}: the id {qid!r} was already used by {self.first_place[qid]}; every example "
                            "needs its own id (predictions are scored by id).")
        question = _text(record, "question", where)
        context = _text(record, "context", where) if context is None else context
        answers = _answers(record, where, context)
        impossible = record.get("is_impossible", not answers)
        if not isinstance(impossible, bool):
            raise DataError(f"{where}: `is_impossible` holds {_describe(impossible)}; expected true or false.")
        if impossible and answers:
            raise DataError(f"{where}: `is_impossible` is true but the question has {len(answers)} answer(s); an "
                            "unanswerable question has an empty `answers` list (SQuAD v2.0 keeps its guesses in "
                            "`plausible_answers`).")
        if not impossible and not answers:
            raise DataError(f"{where}: the question has no answers and `is_impossible` is false; give at least one "
                            "answer, or mark it unanswerable.")
        self.first_place[qid] = where.split(" (id ")[0]
        for column, value in zip(_columns(self.columns), (qid, question, context, answers, impossible)):
            column.append(value)

    def examples(self):
        if not self.columns.ids:
            raise DataError(f"{self.name} holds no question: expected SQuAD JSON ({{\"data\": [...]}}) or one JSON "
                            'object per line, {"question": ..., "context": ..., "answers": [...]}.')
        return self.columns


def _columns(examples):
    """The lists of `examples`, in field order (not `dataclasses.astuple`, which copies them)."""
    return [getattr(examples, field.name) for field in dataclasses.fields(examples)]


def _describe(value):
    return f"a JSON {_json_kind(value)}" if isinstance(value, (dict, list)) else repr(value)


def _text(record, key, where):
    if key not in record:
        raise DataError(f"{where} has no `{key}`. Keys found: {sorted(record)}.")
    value = record[key]
    if not isinstance(value, str):
        raise DataError(f"{where}: `{key}` holds {_describe(value)}; expected a string.")
    _check_no_surrogate(where, key, value)
    if not value.strip():
        raise DataError(f"{where}: `{key}` is empty.")
    return value


def _answers(record, where, context):
    """The record's answers as a list of `{"text", "answer_start"}`, each checked against `context`."""
    answers = record.get("answers", [])
    if isinstance(answers, dict):  # Hugging Face datasets: {"text": [...], "answer_start": [...]}
        texts, starts = answers.get("text"), answers.get("answer_start")
        if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
            raise DataError(f"{where}: `answers` is an object; expected lists `text` and `answer_start` of one "
                            f"length (Hugging Face datasets' layout), or SQuAD's list of objects. Received: "
                            f"{json.dumps(answers)[:120]}")
        answers = [{"text": text, "answer_start": start} for text, start in zip(texts, starts)]
    if not isinstance(answers, list):
        raise DataError(f"{where}: `answers` holds {_describe(answers)}; expected a list of "
                        '{"text": ..., "answer_start": ...} objects.')
    checked = []
    for number, answer in enumerate(answers, start=1):
        here = f"{where}: answer {number}"
        if not isinstance(answer, dict) or "text" not in answer or "answer_start" not in answer:
            raise DataError(f"{here} is {_describe(answer)}; expected an object with `text` and `answer_start`.")
        text, start = answer["text"], answer["answer_start"]
        if not isinstance(text, str) or not text:
            raise DataError(f"{here}: `text` holds {_describe(text)}; expected a non-empty string.")
        if isinstance(start, bool) or not isinstance(start, int):
            raise DataError(f"{here}: `answer_start` holds {_describe(start)}; expected a character index (an "
                            "integer).")
        if not 0 <= start <= len(context) - len(text):
            raise DataError(f"{here} {text!r} at answer_start={start} does not fit in the context of "
                            f"{len(context)} characters.")
        found = context[start : start + len(text)]
        if found != text:
            raise DataError(f"{here} {text!r} is not at answer_start={start}: the context holds {found!r} there. "
                            "`answer_start` counts characters (code points) from 0.")
        checked.append({"text": text, "answer_start": start})
    return checked


# ---------------------------------------------------------------------------
# Files.
# ---------------------------------------------------------------------------


def _read_text(path):
    """The file as one str, line by line so that invalid UTF-8 is named by its line."""
    with open_file(path) as stream:
        return "".join(line for _, line in decoded_lines(stream, path))


def _line_of(text, qid):
    """The line of `"id": "<qid>"` in `text`, or None: SQuAD JSON is parsed whole, which keeps no lines."""
    match = re.search(r'"id"\s*:\s*' + re.escape(json.dumps(qid)), text)
    return None if match is None else text.count("\n", 0, match.start()) + 1


def _squad_document(path, text, document):
    builder = _Builder(path)

    def fail(error, qid):
        line = _line_of(text, qid) if qid is not None else None
        where = path if line is None else place(path, line)
        raise DataError(f"{where}: {error}") from None

    data = document.get("data")
    if not isinstance(data, list):
        raise DataError(f"{path}: `data` holds {_describe(data)}; expected SQuAD's list of articles.")
    for a, article in enumerate(data):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DataError(f"{path}: data[{a}] has no list `paragraphs`.")
        for p, paragraph in enumerate(paragraphs):
            json_path = f"data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise DataError(f"{path}: {json_path} has no list `qas`.")
            try:
                context = _text(paragraph, "context", json_path)
            except DataError as error:
                raise DataError(f"{path}: {error}") from None
            for q, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, dict):
                    raise DataError(f"{path}: {json_path}.qas[{q}] is {_describe(qa)}; expected an object.")
                qid = qa.get("id")
                try:
                    builder.add(qa, f"{json_path}.qas[{q}]", default_id=None, context=context)
                except DataError as error:
                    fail(error, qid if isinstance(qid, str) else None)
    return builder.examples()


def _jsonl_examples(path, text):
    builder = _Builder(path)
    lines = [(number, line) for number, line in enumerate(text.splitlines(keepends=True), start=1)]
    first = next((line for _, line in lines if line.strip()), "")
    if first.lstrip().startswith("["):
        values = _json_array(path, text.rstrip("\r\n"))
    else:
        values = _jsonl_values(path, lines)
    for number, value in values:
        where = place(path, number)
        if not isinstance(value, dict):
            raise DataError(f"{where} is {_describe(value)}; expected an object with `question`, `context` and "
                            "`answers`.")
        builder.add(value, where, default_id=str(number))
    return builder.examples()


def _jsonl_values(path, lines):
    for number, line in lines:
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{place(path, number)} is not valid JSON ({error.msg} at column {error.colno}).") from None
        except (ValueError, RecursionError) as error:
            raise DataError(f"{place(path, number)} is not usable JSON ({error}).") from None


def read_squad(path, fmt=None):
    """Reads SQuAD v1.1 / v2.0 JSON, or JSONL with `question`, `context`, `answers` (and `id`).

    SQuAD's JSON is recognised by its top-level `data`; any other `.json`
    file, and `.jsonl`, is read as one example per line (a JSON array of
    them too). A JSONL example without `id` is named by its line number.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    ...     _ = f.write(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
    ...         "context": "Ada Lovelace wrote the first program.", "qas": [
    ...             {"id": "q1", "question": "Who wrote it?", "answers": [{"text": "Ada Lovelace", "answer_start": 0}]},
    ...             {"id": "q2", "question": "When?", "answers": [], "is_impossible": True}]}]}]}))
    >>> examples = read_squad(f.name)
    >>> examples.ids, examples.answers[0], examples.is_impossible
    (['q1', 'q2'], [{'text': 'Ada Lovelace', 'answer_start': 0}], [False, True])
    >>> os.remove(f.name)

    Args:
        path: str. The file.
        fmt: optional `"squad"` or `"jsonl"`. Defaults to what the file holds.

    Returns:
        `SquadExamples`.

    Raises:
        FileNotFoundError: the file does not exist.
        NotRegularFileError: a FIFO or a device (a `ValueError`).
        DataError: invalid UTF-8 or JSON (or JSON too deep, or an integer
            of over 4,300 digits), a missing or empty question or
            context, an answer that is not where `answer_start` says, an id
            used twice, no question at all; the message names the file, the
            line (for SQuAD JSON, the line of the example's id where it has
            one, and its place `data[a].paragraphs[p].qas[q]`) and the id.
    """
    path = os.fspath(path)
    if fmt not in (None, "squad", "jsonl"):
        raise ValueError(f"Received an invalid value for argument `fmt`, expected 'squad' or 'jsonl'. Received: fmt={fmt!r}")
    text = _read_text(path)
    if not text.strip():
        raise DataError(f"{path} is empty: expected SQuAD JSON or one JSON object per line.")
    fmt = fmt or FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt != "jsonl" and text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            if fmt == "squad" or "Extra data" not in error.msg:  # "Extra data": a second object, so JSONL
                raise DataError(f"{place(path, error.lineno)} is not valid JSON ({error.msg} at column "
                                f"{error.colno}).") from None
        except (ValueError, RecursionError) as error:  # an integer of over 4,300 digits; nesting too deep
            raise DataError(f"{path} is not usable JSON ({error}).") from None
        else:
            if isinstance(document, dict) and "data" in document:
                return _squad_document(path, text, document)
            if fmt == "squad":
                raise DataError(f"{path} has no top-level `data`: it is not SQuAD JSON. Keys found: "
                                f"{sorted(document) if isinstance(document, dict) else _json_kind(document)}.")
    return _jsonl_examples(path, text)


# ---------------------------------------------------------------------------
# Scores: the official SQuAD v2.0 evaluation (which reads v1.1 as it does).
# ---------------------------------------------------------------------------


def normalize_answer(text):
    """Lower-cased, without punctuation, articles (a, an, the) and extra whitespace: SQuAD's comparison."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(prediction, truth):
    predicted, true = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not predicted or not true:  # an empty answer scores only against an empty one
        return float(predicted == true)
    common = sum((collections.Counter(predicted) & collections.Counter(true)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(true)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions, examples):
    """SQuAD's exact match and F1, in percent, as the official v2.0 evaluation script computes them.

    Each question scores its best match over its answers (an unanswerable
    question's only answer is `""`); answers are compared after
    `normalize_answer`.

    >>> examples = SquadExamples.from_lists(["Who?", "When?"], ["Ada wrote.", "Ada wrote."],
    ...                                     [[{"text": "Ada", "answer_start": 0}], []])
    >>> squad_scores({"1": "ada", "2": "wrote"}, examples)
    {'exact_match': 50.0, 'f1': 50.0, 'total': 2, 'has_answer_exact_match': 100.0, 'has_answer_f1': 100.0, 'has_answer_total': 1, 'no_answer_exact_match': 0.0, 'no_answer_f1': 0.0, 'no_answer_total': 1}

    Args:
        predictions: dict id -> predicted answer text (`""` for no answer),
            or a list of texts in the order of `examples`.
        examples: `SquadExamples`.

    Returns:
        A dict: `exact_match`, `f1` (percent), `total`; and the same for
        answerable (`has_answer_*`) and unanswerable (`no_answer_*`)
        questions when the examples hold both.
    """
    if not isinstance(predictions, dict):
        predictions = list(predictions)
        if len(predictions) != len(examples):
            raise ValueError(f"Received {len(predictions)} predictions for {len(examples)} examples.")
        predictions = dict(zip(examples.ids, predictions))
    missing = [qid for qid in examples.ids if qid not in predictions]
    if missing:
        raise ValueError(f"Received no prediction for {len(missing)} question(s), e.g. the id {missing[0]!r}.")
    exact, f1 = [], []
    for qid, answers in zip(examples.ids, examples.answers):
        truths = [a["text"] for a in answers if normalize_answer(a["text"])] or [""]
        prediction = predictions[qid]
        exact.append(max(float(normalize_answer(prediction) == normalize_answer(t)) for t in truths))
        f1.append(max(_f1(prediction, t) for t in truths))

    def summary(rows, prefix=""):
        total = len(rows)
        return {
            f"{prefix}exact_match": 100.0 * sum(exact[i] for i in rows) / total if total else 0.0,
            f"{prefix}f1": 100.0 * sum(f1[i] for i in rows) / total if total else 0.0,
            f"{prefix}total": total,
        }

    scores = summary(range(len(exact)))
    has = [i for i, impossible in enumerate(examples.is_impossible) if not impossible]
    no = [i for i, impossible in enumerate(examples.is_impossible) if impossible]
    if has and no:
        scores.update(summary(has, "has_answer_"))
        scores.update(summary(no, "no_answer_"))
    return scores
