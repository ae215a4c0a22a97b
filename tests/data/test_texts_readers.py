"""The one reader of users' files: `read_texts` (streamed, as `bert-keras predict` reads) and `read_labelled_file`
read the same records and refuse the same files with the same messages."""

import csv
import io
import re
import subprocess
import sys

import pytest

from bert_keras.data.texts import STANDARD_INPUT, DataError, read_labelled_file, read_texts, split_pair


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return str(path)


@pytest.mark.parametrize(
    "name, content",
    [
        ("a.csv", 'text,label\n"hello, ""world""",pos\n"two\nlines",neg\n'),
        ("a.tsv", 'text\tlabel\nhello, "world"\tpos\ntwo\\nlines\tneg\n'),
        ("a.jsonl", '{"text": "hello, \\"world\\"", "label": "pos"}\n{"text": "two\\nlines", "label": "neg"}\n'),
        ("a.json", '[\n {"text": "hello, \\"world\\"", "label": "pos"},\n {"text": "two\\nlines", "label": "neg"}\n]\n'),
        ("b.json", '{"text": "hello, \\"world\\"", "label": "pos"}\n{"text": "two\\nlines", "label": "neg"}\n'),
    ],
)
def test_both_readers_read_the_same_records(tmp_path, name, content):
    path = _write(tmp_path, name, content)
    streamed = list(read_texts(path))
    labelled = read_labelled_file(path)
    assert [texts for _, texts in streamed] == [[text] for text in labelled.texts]
    assert labelled.texts[0] == 'hello, "world"'
    assert streamed[0][0] == 2 if name.endswith(("csv", "tsv", "a.json")) else streamed[0][0] == 1


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("q.csv", 'text,label\na,pos\n"bad "quote" here",neg\n',
         "{path}: line 3: malformed quoting (',' expected after '\"')"),
        ("u.csv", 'text,label\na,pos\n"b,neg\nc,pos\n', "{path}: line 3: a quote opened in this record is never closed; "
         "the field runs to the end of the file (line 4)"),
        ("w.csv", "text,label\na,pos\nhello, world,neg\n", "{path}: line 3 has 3 fields, expected 2 (as the header). "
         "Quote a field that contains the delimiter ','."),
        ("d.csv", "text,label,text\na,pos,b\n", "{path}: line 1: column 'text' appears twice in the header"),
        ("m.csv", "review,label\na,pos\n", "{path}: missing column(s) ['text']. Columns found: ['review', 'label']."),
        ("s.csv", "text;label\na;pos\n", "The header looks ';'-separated"),
        ("x.csv", b"text,label\na,pos\n\xff b,neg\n", "{path}: line 3 is not valid UTF-8 (byte 0xff at column 1)"),
        ("j.jsonl", '{"text": "a", "label": "pos"}\nnot json\n', "{path}: line 2 is not valid JSON (Expecting value)."),
        ("k.jsonl", '{"text": "a", "label": "pos"}\n{"t": "b", "label": "neg"}\n',
         "{path}: line 2 has no key(s) ['text']. Keys found: ['label', 't']"),
        ("o.jsonl", '{"text": "a", "label": "pos"}\n["b"]\n', "{path}: line 2 is not a JSON object."),
        ("n.jsonl", '{"text": {"a": 1}, "label": "pos"}\n', "{path}: line 1: `text` holds a JSON object; expected text"),
        ("e.json", "[]\n", "{path} holds an empty JSON array"),
        ("z.csv", "\n  \n", "{path} is empty"),
    ],
)
def test_both_readers_refuse_a_file_with_the_same_message(tmp_path, name, content, message):
    path = _write(tmp_path, name, content)
    message = message.format(path=path)
    with pytest.raises(DataError, match=re.escape(message)):
        list(read_texts(path))
    with pytest.raises(DataError, match=re.escape(message)):
        read_labelled_file(path)


def test_empty_records_are_kept_by_the_stream_and_refused_between_labelled_examples(tmp_path):
    path = _write(tmp_path, "b.csv", "text,label\ngood,pos\n\nbad,neg\n\n")
    assert list(read_texts(path)) == [(2, ["good"]), (3, [""]), (4, ["bad"]), (5, [""])]
    with pytest.raises(DataError, match=re.escape(f"{path}: line 3 is empty. Remove empty lines from the file.")):
        read_labelled_file(path)
    assert read_labelled_file(_write(tmp_path, "t.csv", "text,label\ngood,pos\n\n\n")).texts == ["good"]


def test_lines_and_pairs_from_a_stream():
    stream = io.BytesIO("\ufeffgood movie\tgreat\r\n\nlone\n".encode())
    assert list(read_texts(stream)) == [(1, ["good movie\tgreat"]), (2, [""]), (3, ["lone"])]
    stream.seek(0)
    records = read_texts(stream, pairs=True)
    assert next(records) == (1, ["good movie", "great"]) and next(records) == (2, ["", ""])
    with pytest.raises(DataError, match=re.escape("standard input line 3 is not a text pair: give each as TEXT<TAB>TEXT_PAIR")):
        next(records)
    with pytest.raises(DataError, match=re.escape("standard input line 2 is not valid UTF-8 (byte 0xfe at column 2)")):
        list(read_texts(io.BytesIO(b"fine\nx\xfe\n")))
    assert split_pair("q\ta\tb", "TEXT argument 1") == ["q", "a\tb"]


def test_pairs_and_columns_of_tables(tmp_path):
    path = _write(tmp_path, "p.csv", "id;question;answer\n1;who?;me\n2;why?;\n")
    records = read_texts(path, "question", "answer", pairs=True, delimiter=";")
    assert list(records) == [(2, ["who?", "me"]), (3, ["why?", ""])]
    path = _write(tmp_path, "p.jsonl", '{"q": "who?", "a": null, "n": 1}\n{"q": 2, "a": "x", "n": [1]}\n')
    assert list(read_texts(path, "q", "a", pairs=True)) == [(1, ["who?", ""]), (2, ["2", "x"])]


def test_lone_carriage_returns_end_csv_lines_as_the_csv_module_counts_them(tmp_path):
    path = _write(tmp_path, "r.csv", 'text,label\ra,pos\r"b\rc",neg\r\n')
    assert list(read_texts(path)) == [(2, ["a"]), (3, ["b\rc"])]
    assert read_labelled_file(path).texts == ["a", "b\rc"]


def test_the_caller_names_its_arguments_in_messages(tmp_path):
    cli_names = {"delimiter": "--delimiter", "text_column": "--text-column", "text_pair_column": "--text-pair-column"}
    csv_path, jsonl = _write(tmp_path, "a.csv", "text,label\na,pos\n"), _write(tmp_path, "a.jsonl", '{"text": "a"}\n')
    with pytest.raises(ValueError, match=re.escape("argument `--delimiter`, expected one character other than a quote "
                                                   "or a line break. Received: --delimiter=';;'")):
        read_labelled_file(csv_path, delimiter=";;", arguments=cli_names)
    with pytest.raises(ValueError, match=re.escape(f"argument `delimiter`: it applies to CSV and TSV files, not to "
                                                   f"{jsonl} (JSONL). Received: delimiter=';'")):
        read_texts(jsonl, delimiter=";")
    with pytest.raises(ValueError, match=re.escape(f"argument `--delimiter`: it applies to CSV and TSV files, not to "
                                                   f"{STANDARD_INPUT} (one text per line)")):
        read_texts(io.BytesIO(b"a\n"), delimiter=";", arguments=cli_names)
    with pytest.raises(ValueError, match=re.escape("argument `--text-column`: it applies to CSV, TSV, JSON and JSONL "
                                                   "files; standard input is read as one text per line.")):
        read_texts(io.BytesIO(b"a\n"), text_column="review", arguments=cli_names)
    semicolons = _write(tmp_path, "s.csv", "text;label\na;pos\n")
    with pytest.raises(DataError, match=re.escape("The header looks ';'-separated: pass --delimiter ';'.")):
        read_labelled_file(semicolons, arguments=cli_names)
    with pytest.raises(ValueError, match="unknown keys: \\['delimeter'\\]"):
        read_texts(csv_path, arguments={"delimeter": "-d"})
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'missing.csv'}: no such file.")):
        read_texts(str(tmp_path / "missing.csv"))


def test_streaming_reads_as_it_goes_and_closes_the_file(tmp_path):
    long_text = "word " * 40_000  # above csv's default field limit of 131,072 characters
    path = _write(tmp_path, "long.csv", f'text,label\n"{long_text}",pos\nbad "quote,neg\n"open,pos\n')
    records = read_texts(path)
    assert next(records) == (2, [long_text])
    assert csv.field_size_limit() == 131_072  # lifted only while a record is read
    assert next(records) == (3, ['bad "quote'])  # strict CSV: a quote inside an unquoted field is text
    with pytest.raises(DataError, match="line 4: a quote opened in this record is never closed"):
        next(records)
    records = read_texts(path)
    next(records)
    records.close()  # the caller stops early: the file is closed
    assert records.gi_frame is None


def test_the_reader_imports_no_tensorflow():
    code = ("import io, sys\nfrom bert_keras.data.texts import read_texts\nlist(read_texts(io.BytesIO(b'a')))\n"
            "print('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
