import numpy as np
import pytest

from bert_keras.data.texts import DataError, read_labelled_file, stratified_split


def test_reads_csv_tsv_and_jsonl(tmp_path):
    (tmp_path / "a.csv").write_text('text,label\n"hello, world",pos\nbad day,neg\n')
    (tmp_path / "a.tsv").write_text("text\tlabel\thello, world\tpos\n".replace("\thello", "\nhello") + "bad day\tneg\n")
    (tmp_path / "a.jsonl").write_text('{"text": "hello, world", "label": "pos"}\n{"text": "bad day", "label": "neg"}\n\n')
    for name in ("a.csv", "a.tsv", "a.jsonl"):
        data = read_labelled_file(str(tmp_path / name))
        assert data.texts == ["hello, world", "bad day"]
        assert data.label_names == ["neg", "pos"]
        assert data.labels.tolist() == [1, 0]


def test_pairs_and_fixed_label_order(tmp_path):
    (tmp_path / "p.csv").write_text("q,a,y\nwho?,me,yes\nwhy?,no,no\n")
    data = read_labelled_file(str(tmp_path / "p.csv"), "q", "y", text_pair_column="a", label_names=["yes", "no"])
    assert data.text_pairs == ["me", "no"] and data.labels.tolist() == [0, 1]
    assert data.subset([1]).text_pairs == ["no"]


def test_bad_json_line(tmp_path):
    (tmp_path / "b.jsonl").write_text('{"text": "a", "label": "x"}\nnot json\n')
    with pytest.raises(DataError, match=r"line 2 is not valid JSON"):
        read_labelled_file(str(tmp_path / "b.jsonl"))


def test_header_without_examples(tmp_path):
    (tmp_path / "h.csv").write_text("text,label\n")
    with pytest.raises(DataError, match="holds a header but no examples"):
        read_labelled_file(str(tmp_path / "h.csv"))


def test_stratified_split_keeps_class_shares():
    labels = np.array([0] * 600 + [1] * 300 + [2] * 100)
    train, val, test = stratified_split(labels, (0.8, 0.1, 0.1), seed=3)
    assert len(train) == 800 and len(val) == 100 and len(test) == 100
    assert np.bincount(labels[test]).tolist() == [60, 30, 10]
    assert len(set(train) | set(val) | set(test)) == 1000
    again = stratified_split(labels, (0.8, 0.1, 0.1), seed=3)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again))
    with pytest.raises(ValueError, match="fractions"):
        stratified_split(labels, (0.8, 0.5))
