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
