"""Commands run in processes forked from one that has imported TensorFlow and bert_keras already.

A test that runs `bert-keras` or a driver script in a process of its own (to
kill it at a fault point, to run the workers of a cluster side by side, to
read its exit status) paid TensorFlow's import in every process: a tiny
`bert-keras convert` took 27 s as `python -m bert_keras.cli`, 16-17 s forked
from a process that had the imports done (2-core Intel Xeon, 2026-12-03).
`start(argv)` forks the command's process from such a server (Python's
"forkserver" start method and its preload list, started once per test
process), and runs in it what the argv names:

    [sys.executable, "-m", "bert_keras.cli", ARGS...]   bert_keras.cli.main(ARGS)
    [sys.executable, "-m", MODULE, ARGS...]             MODULE run as __main__
    [sys.executable, "-c", SOURCE, ARGS...]             SOURCE run as __main__

with the environment, working directory and standard input given, its
standard output and error written to files that are read back when it ends.
`returncode` is what `subprocess` reports: the exit status, or minus the
signal that killed it. The server imported the modules under the environment
of the test process (`TF_CPP_MIN_LOG_LEVEL=2`, tests/conftest.py): what a
process reads while TensorFlow imports (its C++ log level, the log lines it
prints as it loads) is not what a forked one can show. Tests of that start a
fresh interpreter (tests/commands/test_quiet_commands.py).
"""

import gc
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the commands under test import; the forked processes start with these done.
PRELOAD = ("tensorflow", "keras", "tensorflow_text", "bert_keras.cli", "bert_keras.training.finetune",
           "bert_keras.training.pretrain", "bert_keras.hub", "bert_keras.export", "bert_keras.formats",
           "bert_keras.training.strategy", "bert_keras.tasks.sentence_encoder", "bert_keras.search", "tests.forked")

_lock = threading.Lock()
_context = None


def _forkserver():
    global _context
    with _lock:
        if _context is None:
            if ROOT not in sys.path:
                sys.path.insert(0, ROOT)
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(list(PRELOAD))
            _context = context
        return _context


def _run_as_main(argv):
    """Runs what `python ARGV...` runs (argv without the interpreter); returns its exit status."""
    flag, target, *arguments = argv
    try:
        if flag == "-m" and target == "bert_keras.cli":  # imported in the server: its main, not a second copy
            from bert_keras import cli

            sys.argv = [cli.__file__, *arguments]
            return cli.main(arguments)
        if flag == "-m":
            sys.argv = [target, *arguments]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
            return 0
        if flag == "-c":
            sys.argv = ["-c", *arguments]
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            return 0
        raise ValueError(f"tests.forked runs `-m MODULE` or `-c SOURCE`, not {flag!r}")
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            return exit.code or 0
        print(exit.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - what the interpreter does: the traceback, status 1
        traceback.print_exc()
        return 1


def _child(argv, env, cwd, stdin_path, stdout_path, stderr_path):
    """The forked process: standard streams, environment and directory as asked, then the command."""
    for fd, path, flags in ((0, stdin_path, os.O_RDONLY), (1, stdout_path, os.O_WRONLY), (2, stderr_path, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, closefd=False)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    # The server's imports (TensorFlow's hundreds of thousands of objects) out of the cyclic collector's walks, as
    # `bert-keras` freezes its own TensorFlow import (bert_keras._platform.native_log.freeze_tensorflow_import).
    gc.freeze()
    code = _run_as_main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


class Forked:
    """A running command (see the module's docstring): `pid`, `args`, `returncode`, `kill()`, `communicate()`."""

    def __init__(self, argv, env=None, cwd=None, input=None, text=True):
        argv = [os.fspath(part) if not isinstance(part, str) else part for part in argv]
        if argv[0] != sys.executable:
            raise ValueError(f"tests.forked runs this interpreter's commands, not {argv[0]!r}")
        self.args, self._text, self.returncode = argv, text, None
        self._directory = tempfile.mkdtemp(prefix="forked-")
        paths = [os.path.join(self._directory, name) for name in ("stdin", "stdout", "stderr")]
        with open(paths[0], "wb") as f:
            f.write(input.encode() if isinstance(input, str) else (input or b""))
        for path in paths[1:]:
            open(path, "wb").close()
        self._stdout_path, self._stderr_path = paths[1:]
        env = dict(os.environ if env is None else env)
        self._process = _forkserver().Process(target=_child, args=(argv[1:], env, os.fspath(cwd or os.getcwd()), *paths))
        self._process.start()
        self.pid = self._process.pid

    def poll(self):
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout=None):
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def send_signal(self, number):
        if self.poll() is None:
            os.kill(self.pid, number)

    def communicate(self, timeout=None):
        """Waits for the end (`subprocess.TimeoutExpired` after `timeout` s); returns `(stdout, stderr)`."""
        self.wait(timeout)
        outputs = []
        for path in (self._stdout_path, self._stderr_path):
            with open(path, "rb") as f:
                data = f.read()
            outputs.append(data.decode(errors="replace") if self._text else data)
        self._process.close()
        for name in os.listdir(self._directory):
            os.remove(os.path.join(self._directory, name))
        os.rmdir(self._directory)
        return tuple(outputs)


def start(argv, env=None, cwd=None, input=None, text=True):
    """Starts `argv` forked (see the module's docstring); returns a `Forked`, used as a `subprocess.Popen`."""
    return Forked(argv, env=env, cwd=cwd, input=input, text=text)


def run(argv, env=None, cwd=None, input=None, text=True, timeout=None):
    """`subprocess.run(argv, capture_output=True, ...)` of a forked command; a killed one after `timeout` raises
    `subprocess.TimeoutExpired` as `subprocess.run` does."""
    process = start(argv, env=env, cwd=cwd, input=input, text=text)
    try:
        stdout, stderr = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
