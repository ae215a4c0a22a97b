"""Runs a command in a process of its own (forked: tests/forked.py), killed at a named point or after a delay, and reads what it left on disk."""

import concurrent.futures
import contextlib
import dataclasses
import heapq
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import tensorflow as tf

from bert_keras import hub
from bert_keras._faults import FAULT_VARIABLE
from bert_keras._files import MARKER, read_marker
from bert_keras.training.backup import resumed_epoch
from tests import forked

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Subprocesses at a time, over all the tests: one per core. Each run is forked from a process that has TensorFlow
# imported (tests/forked.py), so what it costs is the command's own work, mostly tracing: 5-20 s of CPU. The group
# alone on 2 cores (Intel Xeon, 2026-12-03): 402 s, where fresh interpreters took 573 s. Measured when runs were
# fresh interpreters (tests/run_suite.py, the group alone): 3 slots 412 s and 6.16 GB for the group's process tree,
# 2 slots 405 s and 4.69 GB.
SLOTS = 2
TIMEOUT_S = 300
KILLED = -9  # the return code of a process killed by SIGKILL
# Two runs of the same command on the same machine give bit-identical weights here (measured: 0.0); the
# tolerance only allows for a change of thread scheduling. A resume that feeds other batches, skips an
# epoch or draws other dropout masks moves the predictions by 1e-4 to 1e-2 on these models.
TOLERANCE = 1e-6
TEXTS = [
    "tok1 tok2 tok3",
    "tok20 tok30 tok25 tok21",
    "",
    "TOK7, tok8! tok9?",
    "tok33 " * 40,
    "naïve café \u200b\u202e tok4 \U0001F600",
]


class _Slots:
    """At most `SLOTS` subprocesses at once; waiting runs start by priority (lower first), then by arrival."""

    def __init__(self, count):
        self._free = count
        self._waiting = []
        self._arrivals = itertools.count()
        self._condition = threading.Condition()

    @contextlib.contextmanager
    def take(self, priority, count=1):
        with self._condition:
            ticket = (priority, next(self._arrivals))
            heapq.heappush(self._waiting, ticket)
            self._condition.wait_for(lambda: self._waiting[0] == ticket and self._free >= count)
            heapq.heappop(self._waiting)
            self._free -= count
            self._condition.notify_all()
        try:
            yield
        finally:
            with self._condition:
                self._free += count
                self._condition.notify_all()


_slots = _Slots(SLOTS)
# Threads that wait (on a slot, a subprocess or another job's result); the slots bound the subprocesses.
_threads = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="fault-injection")


def start(function, *args):
    """Calls `function(*args)` on a thread of its own; returns the `Future` of its result."""
    return _threads.submit(function, *args)


@dataclasses.dataclass
class Finished:
    """A finished (or killed) subprocess."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


def cli(*args):
    """The argv of `python -m bert_keras.cli ARGS` (the `bert-keras` command)."""
    return [sys.executable, "-m", "bert_keras.cli", *map(str, args)]


def driver(source, *args):
    """The argv of a Python driver script `source` run with `ARGS` (`sys.argv[1:]`)."""
    return [sys.executable, "-c", source, *map(str, args)]


def environment(point=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop(FAULT_VARIABLE, None)
    if point is not None:
        env[FAULT_VARIABLE] = point
    return env


def _popen(argv, point=None):
    return forked.start(argv, env=environment(point), cwd=ROOT)


def _finish(process, started, delay=None):
    """Waits for `process`; with `delay`, kills it with SIGKILL `delay` seconds after `started` unless it ended."""
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S if delay is None else max(0.0, delay - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        if delay is None:
            raise RuntimeError(f"{process.args} did not end within {TIMEOUT_S} s: {stderr[-2000:]}") from None
    return Finished(process.returncode, stdout, stderr, time.monotonic() - started)


def run(argv, point=None, kill_after=None, priority=0):
    """Runs `argv` to its end, to the fault point `point` (where it kills itself), or until `kill_after` seconds.

    Runs of a lower `priority` start first when several wait for a slot.
    """
    with _slots.take(priority):
        return _finish(_popen(argv, point), time.monotonic(), kill_after)


def run_two_at_once(argv, priority=0):
    """Starts two runs of `argv` at the same moment; returns both."""
    with _slots.take(priority, count=2):
        started = time.monotonic()
        processes = [_popen(argv), _popen(argv)]
        return [_finish(process, started) for process in processes]


@dataclasses.dataclass
class Kill:
    """A run killed at `point` (a fault point, or seconds) and a copy of its directory as the kill left it."""

    point: str
    killed: Finished
    snapshot: str


@dataclasses.dataclass
class Chain:
    """Runs of one command in `workdir`: each killed at the next point in turn, then one left to finish."""

    workdir: str
    kills: list
    final: Finished

    def after(self, index):
        """The run that followed kill `index`: the next killed one, or the final run."""
        return self.kills[index + 1].killed if index + 1 < len(self.kills) else self.final


def run_chain(argv, points, workdir, snapshots, priority=0):
    """Runs `argv` in `workdir` killed at each of `points` in turn (copying `workdir` after each), then unharmed.

    A point is a fault point name, or a delay in seconds before a SIGKILL from outside.
    """
    kills = []
    for index, point in enumerate(points):
        if isinstance(point, str):
            killed = run(argv, point, priority=priority)
        else:
            killed = run(argv, kill_after=point, priority=priority)
        snapshot = os.path.join(snapshots, f"{os.path.basename(workdir)}-kill{index}")
        shutil.copytree(workdir, snapshot, symlinks=True)
        kills.append(Kill(str(point), killed, snapshot))
    return Chain(str(workdir), kills, run(argv, priority=priority))


def entries(directory):
    """The entries of `directory`, with the random part of staged and set-aside names replaced by `*`."""
    names = []
    for name in sorted(os.listdir(directory)):
        for prefix in (".partial-", ".replaced-"):
            if name.startswith(prefix):
                name = name[: name.rindex("-") + 1] + "*"
        names.append(name)
    return names


def marker(path):
    """The raw marker dict at `path` (complete or not), or None."""
    try:
        with open(os.path.join(path, MARKER)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def output_state(path, kind):
    """`"absent"`, `"complete"` (the marker says a whole output of `kind`), or what else is there."""
    if not os.path.lexists(path):
        return "absent"
    found = read_marker(path)
    if found is not None and found.get("kind") == kind:
        return "complete"
    return f"INCOMPLETE: {entries(path)} with marker {marker(path)}"


def backup_epoch(directory):
    """The epoch of the latest whole snapshot in a phase's backup directory, or None without one."""
    return resumed_epoch(directory) or None


def max_difference(ours, theirs):
    """The largest absolute difference between two dicts of arrays with the same keys."""
    assert sorted(ours) == sorted(theirs), (sorted(ours), sorted(theirs))
    return max(float(np.max(np.abs(np.asarray(ours[k], "float64") - np.asarray(theirs[k], "float64")))) for k in ours)


def _variables(module):
    values = {}
    for variable in module.variables:
        name = variable.name
        while name in values:  # names are not unique in a SavedModel; the order is
            name += "'"
        values[name] = variable.numpy()
    return values


def classifier_outputs(path):
    """Probabilities for `TEXTS` and every variable of a classifier export (its `serve` endpoint)."""
    module = hub.load(path)
    outputs = module.serve(tf.constant(TEXTS))
    return dict(_variables(module), probabilities=outputs["probabilities"].numpy())


def pair_outputs(path):
    """Outputs of a module pair on `TEXTS` (preprocess -> encoder, and `mlm` where there is one) and its variables."""
    preprocess = hub.load(os.path.join(path, "preprocess"))
    encoder = hub.load(os.path.join(path, "encoder"))
    packed = preprocess(tf.constant(TEXTS))
    outputs = encoder(packed)
    values = dict(_variables(encoder), input_word_ids=packed["input_word_ids"].numpy(),
                  pooled_output=outputs["pooled_output"].numpy(), sequence_output=outputs["sequence_output"].numpy())
    if hasattr(encoder, "mlm"):
        positions = tf.constant([[1, 2]] * len(TEXTS))
        values["mlm_logits"] = encoder.mlm(dict(packed, masked_lm_positions=positions))["mlm_logits"].numpy()
    return values


class Watcher:
    """Lists `path` every few milliseconds while a run writes it, and records any state that is not whole.

    `whole(path)` returns None for a whole output, else a description.
    """

    def __init__(self, path, whole):
        self.path, self.whole = path, whole
        self.seen, self.problems = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.is_set():
            try:
                problem = self.whole(self.path) if os.path.lexists(self.path) else None
                self.seen += os.path.lexists(self.path)
            except FileNotFoundError:  # replaced while being listed: look again
                problem = None
            if problem:
                self.problems.append(problem)
            time.sleep(0.005)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def whole_pair(path):
    """None when `path` holds a marked module pair with both SavedModels, else what is wrong."""
    found = read_marker(path)
    if found is None or found.get("kind") != "module_pair":
        return f"no complete marker: {entries(path)}"
    for module in ("encoder", "preprocess"):
        if not os.path.isfile(os.path.join(path, module, "saved_model.pb")):
            return f"{module}/saved_model.pb missing: {entries(path)}"
    return None


def staged_dir(directory):
    """The one `.partial-*` directory in `directory`."""
    (name,) = [name for name in os.listdir(directory) if name.startswith(".partial-")]
    return os.path.join(directory, name)
