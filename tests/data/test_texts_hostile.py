"""Hostile labelled files: each is read exactly, or refused with a DataError naming the file and the line."""

import csv
import re

import numpy as np
import pytest

from bert_keras.data.texts import DataError, read_labelled_file, read_texts, stratified_split


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return str(path)


# --- fields longer than the csv module's default limit (131,072 characters) ---


@pytest.mark.parametrize("name", ["long.csv", "long.tsv"])
def test_field_longer_than_the_csv_module_limit(tmp_path, name):
    sep = "\t" if name.endswith(".tsv") else ","
    long_text = "word " * 40_000  # 200,000 characters
    path = _write(tmp_path, name, f"text{sep}label\n{long_text}{sep}pos\nshort{sep}neg\n")
    data = read_labelled_file(path)
    assert [len(t) for t in data.texts] == [200_000, 5]
    assert data.label_names == ["neg", "pos"] and data.labels.tolist() == [1, 0]
    assert csv.field_size_limit() == 131_072  # the process-wide limit is left as it was


# --- quotes that do not close ---


def test_unclosed_quote_in_the_last_column_does_not_swallow_the_rows_after_it(tmp_path):
    path = _write(tmp_path, "q.csv", 'text,label\ngood movie,"pos\nbad movie,neg\nfine movie,pos\n')
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == (
        f"{path}: line 2: a quote opened in this record is never closed; the field runs to the end "
        "of the file (line 4). Close the quote, or write a quote inside a quoted field as \"\"."
    )


def test_quoted_field_swallowing_lines_that_look_like_records(tmp_path):
    # The quote closes three lines later, so the quoting itself is valid; but
    # the field holds lines that are records of their own (a label used elsewhere).
    path = _write(tmp_path, "q.csv", 'text,label\n"good movie,pos\nbad movie,neg\nfine movie",pos\nok,neg\n')
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == (
        f"{path}: line 2: the quoted field `text` that starts in this record spans 3 lines, and line 2 "
        "inside it ('good movie,pos') looks like a record of its own (2 fields, label 'pos'). "
        "Check the quotes: a quote inside a quoted field is written \"\"."
    )


def test_multi_line_quoted_text_is_legitimate(tmp_path):
    path = _write(
        tmp_path,
        "m.csv",
        'text,label\n"first line\nsecond line, with a comma\n""quoted"" third",pos\nother,neg\n',
    )
    data = read_labelled_file(path)
    assert data.texts == ['first line\nsecond line, with a comma\n"quoted" third', "other"]
    assert data.labels.tolist() == [1, 0]


def test_label_spanning_lines_is_refused(tmp_path):
    path = _write(tmp_path, "l.csv", 'text,label\nhello,"pos\nneg"\n')
    with pytest.raises(DataError, match=re.escape(f"{path}: line 2: the `label` spans 2 lines ('pos\\nneg')")):
        read_labelled_file(path)


# --- errors at the physical line where the record starts ---


def test_bad_quote_is_reported_where_its_record_starts(tmp_path):
    text = 'text,label\na,pos\n"multi\nline",neg\n"bad "quote" here",pos\nc,neg\n'
    path = _write(tmp_path, "b.csv", text)
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == (
        f"{path}: line 5: malformed quoting (',' expected after '\"'). A quoted field must end "
        "with a quote followed by the delimiter or the end of the line; write a quote inside it as \"\"."
    )


def test_unclosed_quote_is_reported_where_it_opens_not_at_the_end(tmp_path):
    path = _write(tmp_path, "u.csv", 'text,label\na,pos\n"b,neg\nc,pos\nd,neg\n')
    with pytest.raises(DataError, match=re.escape(f"{path}: line 3: a quote opened in this record is never closed")):
        read_labelled_file(path)


def test_row_errors_name_the_first_line_of_a_multi_line_record(tmp_path):
    path = _write(tmp_path, "e.csv", 'text,label\na,pos\n"two\nlines",\n')
    with pytest.raises(DataError, match=re.escape(f"{path}: line 3 has an empty `label`.")):
        read_labelled_file(path)


# --- TSV keeps quotes as text ---


def test_tsv_text_keeps_its_quotes(tmp_path):
    path = _write(tmp_path, "t.tsv", 'text\tlabel\n"Quoted" start\tpos\nsays "hi"\tneg\n"\tpos\n')
    data = read_labelled_file(path)
    assert data.texts == ['"Quoted" start', 'says "hi"', '"']


# --- header and row widths ---


def test_duplicate_header_names(tmp_path):
    path = _write(tmp_path, "d.csv", "text,label,text\na,pos,b\n")
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == f"{path}: line 1: column 'text' appears twice in the header (columns 1 and 3)."


def test_row_with_more_fields_than_the_header(tmp_path):
    path = _write(tmp_path, "x.csv", "text,label\na,pos\nhello, world,neg\n")
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == (
        f"{path}: line 3 has 3 fields, expected 2 (as the header). "
        "Quote a field that contains the delimiter ','."
    )


def test_row_with_fewer_fields_than_the_header(tmp_path):
    path = _write(tmp_path, "f.csv", "text,label,source\na,pos,web\nb,neg\n")
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == f"{path}: line 3 has 2 fields, expected 3 (as the header)."


# --- numeric labels ---


def test_numeric_labels_are_numbers(tmp_path):
    path = _write(tmp_path, "n.csv", "text,label\na,1\nb,1.0\nc,10\nd,2\ne,02\n")
    data = read_labelled_file(path)
    assert data.label_names == ["1", "2", "10"]
    assert data.labels.tolist() == [0, 0, 2, 1, 1]
    # A test file read with the training labels matches them by value.
    other = _write(tmp_path, "t.csv", "text,label\nx,10.0\ny,1e0\n")
    assert read_labelled_file(other, label_names=data.label_names).labels.tolist() == [2, 0]
    mixed = _write(tmp_path, "s.csv", "text,label\na,10\nb,2\nc,pos\n")
    assert read_labelled_file(mixed).label_names == ["10", "2", "pos"]  # not all numbers: strings


def test_numeric_json_labels(tmp_path):
    lines = ['{"text": "a", "label": 1}', '{"text": "b", "label": 1.0}', '{"text": "c", "label": 0.5}']
    path = _write(tmp_path, "n.jsonl", "\n".join(lines) + "\n")
    data = read_labelled_file(path)
    assert data.label_names == ["0.5", "1"] and data.labels.tolist() == [1, 1, 0]


# --- JSON arrays ---


def test_json_array_of_objects(tmp_path):
    path = _write(tmp_path, "a.json", '[\n  {"text": "hello", "label": "pos"},\n  {"text": "bye", "label": "neg"}\n]\n')
    data = read_labelled_file(path)
    assert data.texts == ["hello", "bye"] and data.label_names == ["neg", "pos"] and data.labels.tolist() == [1, 0]


def test_json_array_errors_name_the_line(tmp_path):
    path = _write(tmp_path, "a.json", '[\n  {"text": "hello", "label": "pos"},\n  {"text": "", "label": "neg"}\n]')
    with pytest.raises(DataError, match=re.escape(f"{path}: line 3 has an empty `text`.")):
        read_labelled_file(path)
    path = _write(tmp_path, "b.json", '[\n  {"text": "hello", "label": "pos"},\n  ["bye", "neg"]\n]')
    with pytest.raises(DataError, match=re.escape(f"{path}: line 3 is not a JSON object.")):
        read_labelled_file(path)
    path = _write(tmp_path, "c.json", '[\n  {"text": "hello", "label": "pos"},\n  {"text": "bye"\n')
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == f"{path}: line 3 is not valid JSON (Expecting ',' delimiter at line 3, column 17)."
    path = _write(tmp_path, "d.json", '[\n  {"text": "hello", "label": "pos"}\n\n')
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == (
        f"{path}: line 2 is not valid JSON (expected ',' or ']' after an item of the array, found the end of the file)."
    )



# --- a lone surrogate, written as a JSON escape in a valid UTF-8 file ---


@pytest.mark.parametrize("name, text, line", [
    ("s.jsonl", '{"text": "ok", "label": "pos"}\n{"text": "a \\ud800 b", "label": "neg"}\n', 2),
    ("s.json", '[\n  {"text": "ok", "label": "pos"},\n  {"text": "a \\ud800 b", "label": "neg"}\n]\n', 3),
], ids=["jsonl", "json array"])
def test_a_lone_surrogate_is_refused_naming_the_file_the_line_and_the_key(tmp_path, name, text, line):
    path = _write(tmp_path, name, text)
    message = (f"{path}: line {line}: `text` holds a lone surrogate (\\ud800 at character 3), which is not text. Write the "
               "character itself, or a surrogate pair for one outside the Basic Multilingual Plane.")
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == message
    with pytest.raises(DataError) as info:
        list(read_texts(path))
    assert str(info.value) == message
    # In a label too; a surrogate pair is one character, and read as it.
    path = _write(tmp_path, name, text.replace('"a \\ud800 b", "label": "neg"', '"\\ud83d\\ude00", "label": "\\udfff"'))
    with pytest.raises(DataError, match=re.escape(f"{path}: line {line}: `label` holds a lone surrogate (\\udfff at character 1)")):
        read_labelled_file(path)
    assert [texts for _, texts in read_texts(path)] == [["ok"], ["\U0001f600"]]


# --- delimiters ---


def test_semicolon_separated_csv(tmp_path):
    path = _write(tmp_path, "s.csv", "text;label\nhello, world;pos\nbye;neg\n")
    with pytest.raises(DataError) as info:
        read_labelled_file(path)
    assert str(info.value) == (
        f"{path}: missing column(s) ['text', 'label']. Columns found: ['text;label']. "
        "The header looks ';'-separated: pass delimiter=';' (bert-keras finetune --delimiter ';')."
    )
    data = read_labelled_file(path, delimiter=";")
    assert data.texts == ["hello, world", "bye"] and data.labels.tolist() == [1, 0]


def test_invalid_delimiter(tmp_path):
    path = _write(tmp_path, "s.csv", "text,label\na,pos\n")
    with pytest.raises(ValueError, match=re.escape("Received: delimiter=';;'")):
        read_labelled_file(path, delimiter=";;")
    with pytest.raises(ValueError, match=re.escape("Received: delimiter='\"'")):
        read_labelled_file(path, delimiter='"')


# --- stratified splits of small classes ---


def test_class_too_small_to_split_stays_in_the_first_part():
    labels = np.array([0] * 10 + [1] + [2] * 5)
    train, val = stratified_split(labels, (0.9, 0.1), seed=0)
    assert np.bincount(labels[train], minlength=3).tolist() == [9, 1, 5]
    assert np.bincount(labels[val], minlength=3).tolist() == [1, 0, 0]
    train, val, test = stratified_split(labels, (0.8, 0.1, 0.1), seed=0)
    assert np.bincount(labels[train], minlength=3).tolist() == [8, 1, 5]
    assert np.bincount(labels[test], minlength=3).tolist() == [1, 0, 0]
