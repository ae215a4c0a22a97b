"""tests.forked, which every run of these tests goes through, behaves as `subprocess` does for what the tests read."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests import forked

SOURCE = """
import os, sys
print("out", sys.argv[1:], os.getcwd(), os.environ.get("FORKED_PROBE"), sys.stdin.read())
print("err", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_a_forked_command_gets_its_arguments_environment_directory_and_input(tmp_path):
    env = dict(os.environ, FORKED_PROBE="seen")
    done = forked.run([sys.executable, "-c", SOURCE, "3", "x y"], env=env, cwd=tmp_path, input="given", timeout=120)
    assert done.returncode == 3
    assert done.stdout == f"out ['3', 'x y'] {tmp_path} seen given\n"
    assert done.stderr == "err\n"
    assert forked.run([sys.executable, "-c", SOURCE, "0"], env={"PATH": os.environ["PATH"]}, timeout=120).stdout.split()[-1] == "None"


def test_the_command_line_runs_as_python_m_bert_keras_cli_and_a_traceback_is_status_1(tmp_path):
    done = forked.run([sys.executable, "-m", "bert_keras.cli", "predict", "--model", str(tmp_path / "none"), "hi"], timeout=120)
    expected = subprocess.run([sys.executable, "-m", "bert_keras.cli", "predict", "--model", str(tmp_path / "none"), "hi"],
                              capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (expected.returncode, expected.stdout, expected.stderr)
    assert done.returncode == 2
    failed = forked.run([sys.executable, "-c", "raise RuntimeError('planted')"], timeout=120)
    assert failed.returncode == 1 and failed.stderr.rstrip().endswith("RuntimeError: planted")


def test_a_killed_command_reports_the_signal_and_a_timeout_raises():
    process = forked.start([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"])
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        try:
            process.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if "started" in open(process._stdout_path).read():
            break
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.1)
    process.kill()
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert stdout == "started\n"


def test_only_this_interpreters_commands_are_forked():
    with pytest.raises(ValueError, match="this interpreter's commands"):
        forked.start(["bash", "-c", "true"])
