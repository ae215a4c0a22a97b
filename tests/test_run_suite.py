"""The suite runner: every test file runs exactly once, its lists name real files, its total line reads pytest's."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from tests import run_suite

ROOT = pathlib.Path(run_suite.__file__).resolve().parent


def test_every_test_file_is_in_exactly_one_group():
    covered = []
    for group in run_suite.groups():
        for name in group.split():
            path = ROOT.parent / name
            covered.extend(sorted(path.glob("test_*.py")) if path.is_dir() else [path])
    assert sorted(covered) == sorted(ROOT.rglob("test_*.py"))
    assert len(set(covered)) == len(covered)


def test_its_lists_name_groups_that_exist():
    firsts = [group.split()[0] for group in run_suite.groups()]
    assert set(run_suite.PEAK_GB) <= set(firsts)
    assert sorted(firsts[: len(run_suite.PEAK_GB)], key=list(run_suite.PEAK_GB).index) == list(run_suite.PEAK_GB)
    assert all(peak <= run_suite.MEMORY_BUDGET_GB for peak in run_suite.PEAK_GB.values())  # each can start


def test_record_writes_the_profile_that_plans_the_next_run(tmp_path):
    path = tmp_path / "suite_profile.json"
    measured = {"tests/hub": (3.5 * 2 ** 30, 120.4), "tests/test_cli.py tests/test_x.py": (1.0 * 2 ** 30, 300.0)}
    run_suite.write_profile(measured, path=path)
    profile = json.loads(path.read_text())
    assert profile["recorded_by"].startswith("python tests/run_suite.py --record, ")
    assert profile["groups"] == [{"group": "tests/test_cli.py", "peak_gb": 1.0, "seconds": 300},
                                 {"group": "tests/hub", "peak_gb": 3.5, "seconds": 120}]  # longest first
    assert list(run_suite.read_profile(path).items()) == [("tests/test_cli.py", 1.3), ("tests/hub", 3.8)]  # + margin
    assert run_suite.read_profile(tmp_path / "none.json") == {}
    assert run_suite.main(["--record", "-x"]) == 2  # a profile measures the whole suite, nothing less


def test_the_fast_loop_runs_every_file_too_in_fewer_processes():
    fast = run_suite.fast_groups(run_suite.groups())
    assert sorted(name for group in fast for name in group.split()) == sorted(
        name for group in run_suite.groups() for name in group.split())
    directories = [path for path in ROOT.iterdir()
                   if path.is_dir() and path.name not in run_suite.FILE_GROUPS and any(path.glob("test_*.py"))]
    # The files (top-level, and those of FILE_GROUPS' directories) in FAST_BUNDLES processes; a directory each.
    assert len(fast) == run_suite.FAST_BUNDLES + len(directories)
    assert "tests/commands/test_cli.py" in " ".join(fast) and "tests/commands" not in fast
    assert run_suite.deselects_slow(["-m", "not slow"]) and run_suite.deselects_slow(["-mnot slow and not fuzz"])
    assert not run_suite.deselects_slow(["-m", "slow"]) and not run_suite.deselects_slow(["-x", "-k", "not slow"])


def test_summary_counts_reads_the_last_summary_line():
    output = "collected 9 items\n...\n====== 1 failed, 6 passed, 2 skipped, 1 error in 3.2s ======\n"
    assert run_suite.summary_counts(output) == {"failed": 1, "passed": 6, "skipped": 2, "errors": 1}
    assert run_suite.summary_counts("no tests ran in 0.01s") == {}


def test_a_failed_groups_excerpt_keeps_the_error_and_the_summary_and_leaves_out_the_rest():
    report = [f"line {i} of the test's source" for i in range(80)] + ["E       assert 1 == 2", "x.py:2: AssertionError"]
    output = "\n".join(["collected 2 items", "x.py F.", "=" * 10 + " FAILURES " + "=" * 10, "___ test_a ___", *report,
                         "=" * 10 + " slowest 25 durations " + "=" * 10, "12.00s call x.py::test_a",
                         "=" * 10 + " short test summary info " + "=" * 10, "FAILED x.py::test_a - assert 1 == 2",
                         "=" * 10 + " 1 failed, 1 passed in 12.1s " + "=" * 10])
    excerpt = run_suite.failure_excerpt(output, lines=20).splitlines()
    assert excerpt[-4:] == ["E       assert 1 == 2", "x.py:2: AssertionError", "=" * 10 + " short test summary info " + "=" * 10,
                            "FAILED x.py::test_a - assert 1 == 2"]
    assert len(excerpt) == 20 + 2 and "12.00s call x.py::test_a" not in excerpt and "line 0 of the test's source" not in excerpt
    crashed = "\n".join(f"line {i}" for i in range(100)) + "\nFatal Python error: Segmentation fault"
    assert run_suite.failure_excerpt(crashed, lines=5).splitlines() == ["line 96", "line 97", "line 98", "line 99",
                                                                        "Fatal Python error: Segmentation fault"]


def test_tree_rss_counts_the_children():
    size = 200 * 2 ** 20
    child = subprocess.Popen([sys.executable, "-c", f"import sys, time; b = bytearray({size}); b[::4096] = bytes(len(b[::4096])); "
                              "print(1, flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # its 200 MB are written (touched) and resident
        child_alone = run_suite.tree_rss([child.pid])[child.pid]
        ours = run_suite.tree_rss([os.getpid()])[os.getpid()]
        assert child_alone > size
        assert ours > child_alone + 20 * 2 ** 20  # the child and this (larger) pytest process
        assert run_suite.tree_rss([2 ** 22 + 7]) == {2 ** 22 + 7: 0}  # no such process
    finally:
        child.kill()
        child.wait()


def test_tree_rss_counts_pages_a_forked_child_shares_once():
    """A process forked from another shares its pages (tests/forked.py's commands share TensorFlow's): counted
    once between them, not once in each as resident sizes would (here: > 400 MB for the two)."""
    size = 200 * 2 ** 20
    script = (f"import os, sys, time; b = bytearray({size}); b[::4096] = bytes(len(b[::4096]))\n"
              "if os.fork() == 0:\n    time.sleep(60)\nprint(1, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    try:
        parent.stdout.readline()
        both = run_suite.tree_rss([parent.pid])[parent.pid]
        assert size < both < 1.5 * size, both / 2 ** 20
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_a_group_forked_from_the_server_reports_what_a_fresh_interpreter_reports(tmp_path, monkeypatch):
    """The suite's groups run forked (`_Forked`); the exit status and the summary the runner reads are those of
    `python -m pytest` in a fresh interpreter (`_Fresh`, `--fresh`)."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("import os\n\ndef test_passes():\n    assert os.getcwd()\n\ndef test_fails():\n    assert 1 == 2\n")
    monkeypatch.setattr(run_suite, "PRELOAD", ("pytest",))  # the test of the mechanism need not import TensorFlow
    monkeypatch.setattr(run_suite._Forked, "_context", None)
    results = {}
    for kind in (run_suite._Fresh, run_suite._Forked):
        output = tmp_path / f"{kind.__name__}.log"
        process = kind([str(probe), "-q", "-p", "no:cacheprovider"], str(output))
        for _ in range(1200):
            if process.poll() is not None:
                break
            time.sleep(0.1)
        results[kind.__name__] = (process.poll(), run_suite.summary_counts(output.read_text()))
    assert results["_Fresh"] == results["_Forked"] == (1, {"passed": 1, "failed": 1})
