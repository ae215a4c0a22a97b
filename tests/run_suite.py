"""Runs the test suite as one pytest process per group of test files, two at a time, and prints one total line.

TensorFlow keeps what a test builds (graphs, traced functions, loaded
SavedModels) for the life of the process, so one pytest process over the
whole suite grows past 20 GB. One process per group gives that memory back
between groups. A group is one directory of tests/ (its files share session
fixtures), one top-level test file (or a file of the FILE_GROUPS directories), or one of the BUNDLES of small files and
directories. Groups run `--jobs` at a time
(default: two, or one on a one-core machine): most of a test's time is
Python tracing graphs on one core. A group starts only while the peaks
(PEAK_GB: what `--record` measured in a full run, kept in suite_profile.json)
of the groups running, its own added, stay within MEMORY_BUDGET_GB, so that the processes of the suite together stay under
6 GB. Each group's pytest is forked from a server process that imported
TensorFlow, Keras, TF.Text and pytest once (PRELOAD), so that no group pays
those imports; `--fresh` (before the pytest arguments) starts each group in a
fresh interpreter instead.

Each group's output is printed whole when it ends, with its time and the
peak memory of its process tree (pytest and every process it started; the
proportional set size, which counts a page that forked processes share once,
not once per process); the end gives the suite's time and the peak of all test processes
together. Arguments are passed to every pytest run (e.g. `-m "not slow"` for
the fast loop, `-x`, `-k NAME`). With `-m "not slow"` the top-level files run in
FAST_BUNDLES processes, not one each: their slow tests, which need their memory
given back, are left out. `--jobs N` before them sets the number of
groups at a time. With BERT_KERAS_SUITE_XML=DIR each group also writes
pytest's JUnit XML (every test's time) into DIR.

Exit status: 0 when every group passed (a group that the arguments leave
without tests counts as passed), 1 when any failed, 5 when no test ran at all.
The last line is the total over the groups, as `total: N passed, N failed, N skipped`.

    python tests/run_suite.py                 # the whole suite (CI)
    python tests/run_suite.py -m "not slow"   # the fast loop
    python tests/run_suite.py --jobs 1 -x     # one group at a time, stop each at its first failure
    python tests/run_suite.py --fresh         # each group in a fresh interpreter
    python tests/run_suite.py --record        # the whole suite, then each group's peak and time into suite_profile.json
"""

import collections
import json
import multiprocessing
import multiprocessing.forkserver
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent
NO_TESTS = 5  # pytest's exit status when nothing was collected (or all deselected)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)")

# Each directory of tests/ is one process: its files share session fixtures (fault_injection's runs, hub's
# modules, distribute's one-replica reference), which one process per file would compute again per file.
# Each top-level test file is a process of its own.
# What each group cost in the last recorded full run, measured by this script (`--record` writes it): the peak memory
# of its process tree (pytest and the processes it starts; proportional set size) and its seconds. A group starts
# only while the peaks of those running, plus PEAK_MARGIN_GB each, stay within MEMORY_BUDGET_GB; groups start
# longest first, so that the short ones fill in around the long ones and the suite does not end on one long group
# with a core idle. A group the profile does not list counts DEFAULT_PEAK_GB and starts after the listed ones.
PROFILE = ROOT / "suite_profile.json"
PEAK_MARGIN_GB = 0.3


def read_profile(path=PROFILE):
    """`{group's first path: peak GB to plan with}`, longest group first, from the profile `--record` wrote
    ({} when there is none)."""
    try:
        with open(path) as f:
            entries = json.load(f)["groups"]
    except (OSError, ValueError, KeyError):
        return {}
    entries = sorted(entries, key=lambda entry: -(entry.get("seconds") or 0))  # stable: unmeasured keep their order
    return {entry["group"]: round(entry["peak_gb"] + PEAK_MARGIN_GB, 1) for entry in entries}


PEAK_GB = read_profile()
DEFAULT_PEAK_GB = 2.0
# Test files that share a process: a process start costs ~10 s of CPU before the first test (TensorFlow's import
# and the collection; `pytest --collect-only tests/layers`: 9.9 s on a 2-core Intel Xeon, 2026-12-02), which a
# bundle pays once. A bundle is named in PEAK_GB by its first entry. What a process builds stays until it ends, so a
# bundle peaks above its parts: tests/inspection, tests/checkpoints, test_hostile_files.py and test_docstrings.py
# peaked at 1.7-2.0 GB each alone and at 5.20 GB as one bundle (2026-12-02); the groups stay apart.
BUNDLES = [
    ["tests/data/test_texts.py", "tests/data/test_texts_hostile.py", "tests/data/test_texts_readers.py",
     "tests/export/test_export.py", "tests/test_files.py", "tests/data/test_fuzz_readers.py", "tests/test_heads.py",
     "tests/test_platform.py", "tests/test_layering.py", "tests/test_lora_hostile.py",
     "tests/commands/test_quiet_commands.py", "tests/test_run_suite.py", "tests/test_soak.py"],
]
# Directories whose files are groups of their own, as the top-level files are: they mirror a package
# (bert_keras.commands, bert_keras.export, bert_keras.checkpoints, bert_keras.data, bert_keras.tasks) but share no
# session fixture, and
# one process over all of them would hold what every file builds (the commands' tests each build and export models;
# tests/checkpoints as one process peaked at 8.18 GB once the ModernBERT, DeBERTa-v3 and XLM-RoBERTa files joined it,
# 2026-12-07); tests/data's readers' files join BUNDLES' first bundle or run alone, as when they were top-level files.
# tests/text too: its files share only cheap session fixtures (a vocabulary, the tweets, a reference tokenizer), and
# one process over it held what all of them build: 3.49 GB in the full run of 2026-12-07, the suite's longest group,
# beside which only the smallest could run; file by file they peaked at 0.18-1.97 GB (those measured alone, forked as
# here, 2026-12-07; most under 1 GB), so each runs beside all but the largest groups.
FILE_GROUPS = ("commands", "export", "checkpoints", "data", "tasks", "text")
MEMORY_BUDGET_GB = 6.0
# What the runner and the server the groups are forked from hold beside the groups: the peaks of two groups planned
# to 6.0 GB together peaked at 6.40 GB with them (CI, 2026-12-04); planned within 5.5 GB by the profile they reached
# at most 5.45 GB by it and 6.37 GB measured with the server (2026-12-05), so the full run plans within 5.0 GB
# (the profile's order simulated at 5.0 GB: 40.5 minutes against 38.4 at 5.5).
SERVER_RESERVE_GB = 1.0
FAST_BUNDLES = 4  # processes for the top-level files in the fast loop (two peaked at 3.8 and 4.5 GB, 2026-12-02)
FAST_PEAK_GB = 3.0  # any group of the fast loop
# How often the memory of the groups is read. Reading it every pass of the loop (every 0.5 s) took the runner a
# quarter of a core, 7 min 28 s of CPU in the first 28 minutes of a full run (2-core AMD EPYC, 2026-12-07): one read
# of every process's proportional set size took 0.19 s of CPU, each group's read twice (in its tree and the runner's).
MEMORY_SAMPLE_SECONDS = 2.0


def groups():
    """The groups, one per pytest process, in the order they start: test paths relative to the repository,
    separated by spaces where a group holds several (BUNDLES)."""
    relative = lambda path: str(path.relative_to(ROOT.parent))  # noqa: E731
    found = [relative(path) for path in sorted(ROOT.iterdir())
             if path.is_dir() and path.name not in FILE_GROUPS and any(path.glob("test_*.py"))]
    found += [relative(path) for path in sorted(ROOT.glob("test_*.py"))]
    found += [relative(path) for name in FILE_GROUPS for path in sorted((ROOT / name).glob("test_*.py"))]
    bundled = {name for bundle in BUNDLES for name in bundle}
    found = [name for name in found if name not in bundled]
    found += [" ".join(name for name in bundle if (ROOT.parent / name).exists()) for bundle in BUNDLES]
    rank = {name: i for i, name in enumerate(PEAK_GB)}
    return sorted(filter(None, found), key=lambda group: rank.get(group.split()[0], len(rank)))


def peak_gb(group):
    return PEAK_GB.get(group.split()[0], DEFAULT_PEAK_GB)


def summary_counts(output):
    """`{"passed": n, ...}` from the last summary line of a pytest run's output."""
    lines = [line for line in output.splitlines() if _COUNT.search(line) and (" in " in line or line.startswith("="))]
    counts = {}
    for number, word in _COUNT.findall(lines[-1] if lines else ""):
        word = "errors" if word.startswith("error") else word
        counts[word] = counts.get(word, 0) + int(number)
    return counts


def _resident_bytes(pid, page):
    """The process's proportional set size (its own pages, and its share of pages it shares: a process forked
    from another, as tests/forked.py's are, shares most of its parent's), or its resident size where the kernel
    gives no smaps_rollup."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * page


def tree_rss(root_pids):
    """{root pid: memory of it and all its descendants (see `_resident_bytes`)}, read from /proc ({} where there is
    no /proc)."""
    parents = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    children = collections.defaultdict(list)
    for pid, parent in parents.items():
        children[parent].append(pid)
    trees = {}
    for root in root_pids:
        trees[root], stack = [], [root]
        while stack:
            pid = stack.pop()
            trees[root].append(pid)
            stack.extend(children.get(pid, ()))
    # Each process read once, though it is in several trees (the runner's holds every group's): a read walks the
    # process's page tables, ~0.1 s of CPU for the suite's processes together.
    sizes = {}
    for pid in {pid for tree in trees.values() for pid in tree}:
        try:
            sizes[pid] = _resident_bytes(pid, page)
        except (OSError, IndexError, ValueError):  # ended meanwhile
            sizes[pid] = 0
    totals = {root: sum(sizes[pid] for pid in tree) for root, tree in trees.items()}
    return totals


# What every group imports before its first test: each group's pytest runs in a process forked from one that has
# imported them (Python's "forkserver" start method, its preload list), not in a fresh interpreter that imports
# them again (~7-10 s of CPU a group: TensorFlow, Keras, TF.Text, and hypothesis, which pytest loads as a plugin).
# A group's process starts from that state alone, so groups share nothing else: what one builds goes when it ends.
# Not torch and transformers, the reference of ~50 test files (3.7 s a group that imports them): imported in every
# group, they made TensorFlow's and Keras' own work ~4% slower (a tiny classifier's fit, predict and matmuls, 5
# alternated pairs of fresh processes on the 2-core AMD EPYC: +0.08 to +1.64 s of ~18 s CPU; Python's cyclic
# collector ran 2,282 times for 2.45 s against 1,517 times for 1.66 s), and the full run took 49 min 11 s with them.
PRELOAD = ("tensorflow", "keras", "tensorflow_text", "numpy", "pytest", "hypothesis", "bert_keras")


def _pytest(arguments, output_path):
    """A group's process: pytest on `arguments`, its output (stdout and stderr) into `output_path`."""
    output = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    os.chdir(ROOT.parent)
    sys.path.insert(0, str(ROOT.parent))  # what `python -m pytest` puts first
    import pytest

    code = pytest.main(arguments)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(int(code))


class _Fresh:
    """A group's pytest in a fresh interpreter (`--fresh`): the process as `_Forked` shows it."""

    def __init__(self, arguments, output_path):
        self._output = open(output_path, "w")
        self._process = subprocess.Popen([sys.executable, "-m", "pytest", *arguments], cwd=ROOT.parent,
                                         stdout=self._output, stderr=subprocess.STDOUT)
        self.pid = self._process.pid

    def poll(self):
        status = self._process.poll()
        if status is not None:
            self._output.close()
        return status


class _Forked:
    """A group's pytest forked from the preloaded server: `pid`, and `poll()` as `subprocess.Popen` has it."""

    _context = None

    def __init__(self, arguments, output_path):
        if _Forked._context is None:
            _Forked._context = multiprocessing.get_context("forkserver")
            _Forked._context.set_forkserver_preload(list(PRELOAD))
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as tests/conftest.py sets it, before the imports
            os.environ.setdefault("KERAS_BACKEND", "tensorflow")
            # TensorFlow's C++ log lines of the server's imports (printed whatever the level) go nowhere.
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            try:
                multiprocessing.forkserver.ensure_running()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
        self._process = _Forked._context.Process(target=_pytest, args=(arguments, output_path))
        self._process.start()
        self.pid = self._process.pid

    def poll(self):
        return self._process.exitcode


class _Run:
    """One group's pytest process, its output in a file read when it ends, its peak memory kept by the scheduler."""

    def __init__(self, group, arguments, xml_directory, fresh, output_directory):
        self.group, self.started, self.peak = group, time.time(), 0
        extra = []
        if xml_directory:
            extra = [f"--junitxml={pathlib.Path(xml_directory) / (group.split()[0].replace('/', '_') + '.xml')}"]
        self._output_path = os.path.join(output_directory, group.split()[0].replace("/", "_") + ".log")
        self.process = (_Fresh if fresh else _Forked)([*group.split(), *arguments, *extra], self._output_path)

    def output(self):
        with open(self._output_path, errors="replace") as f:
            return f.read()


def _gigabytes(size):
    return f"{size / 2 ** 30:.2f} GB"


def fast_groups(found):
    """The fast loop's groups: the top-level files in FAST_BUNDLES processes (their slow tests, which need their
    memory given back, are deselected), each directory in its own."""
    names = [name for group in found for name in group.split()]
    files = [name for name in names if name.endswith(".py")]
    directories = [name for name in names if not name.endswith(".py")]
    return [" ".join(files[i::FAST_BUNDLES]) for i in range(FAST_BUNDLES)] + directories


def deselects_slow(arguments):
    """Whether the pytest arguments select `-m "not slow"` (or an expression that leaves out slow tests)."""
    return any(arguments[i] == "-m" and "not slow" in arguments[i + 1] for i in range(len(arguments) - 1)) or any(
        argument.startswith("-m") and "not slow" in argument for argument in arguments)


def _machine():
    """The CPU model and its AVX-512/AMX flags, as every figure of this project states them."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags.update(flag for flag in line.split(":", 1)[1].split() if flag.startswith(("avx512", "amx")))
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores" + (f" ({' '.join(sorted(flags))})" if flags else "")


def write_profile(measured, path=PROFILE):
    """Writes `{group: (peak bytes, seconds)}` of a full run as the profile later runs plan with (`read_profile`)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT.parent, capture_output=True,
                            text=True).stdout.strip()
    groups = [{"group": group.split()[0], "peak_gb": round(peak / 2 ** 30, 2), "seconds": round(seconds)}
              for group, (peak, seconds) in sorted(measured.items(), key=lambda item: -item[1][1])]
    profile = {"recorded_by": f"python tests/run_suite.py --record, {time.strftime('%Y-%m-%d')}, at {commit or '?'}, "
                              f"on {_machine()}", "groups": groups}
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        json.dump(profile, f, indent=1)
        f.write("\n")
    os.replace(temporary, path)


def failure_excerpt(output, lines=50):
    """What a failed group's log says of its failures: the end of pytest's failure reports (at most `lines`
    lines: each report ends with its error) and its short test summary; the log's last `lines` lines where it
    has neither (a group that crashed or failed before its tests)."""
    text = output.splitlines()
    sections = [i for i, line in enumerate(text) if re.match(r"=+ .+ =+$", line)]

    def section(title):
        start = next((i for i in sections if title in text[i]), None)
        if start is None:
            return []
        end = next((i for i in sections if i > start), len(text))
        return text[start:end]

    reports, summary = section(" FAILURES ") + section(" ERRORS "), section("short test summary info")
    if not reports and not summary:
        return "\n".join(text[-lines:])
    return "\n".join(reports[-lines:] + summary)


def main(arguments):
    jobs = 2 if (os.cpu_count() or 1) > 1 else 1
    record = fresh = False
    while arguments[:1] in (["--jobs"], ["--fresh"], ["--record"]):
        if arguments[0] == "--jobs":
            jobs, arguments = max(1, int(arguments[1])), arguments[2:]
        else:
            record, fresh = record or arguments[0] == "--record", fresh or arguments[0] == "--fresh"
            arguments = arguments[1:]
    if record and arguments:
        print(f"--record measures the whole suite: it takes no pytest arguments. Received: {' '.join(arguments)}")
        return 2
    output_directory = tempfile.mkdtemp(prefix="run-suite-")
    xml_directory = os.environ.get("BERT_KERAS_SUITE_XML")
    if xml_directory:
        os.makedirs(xml_directory, exist_ok=True)
    fast = deselects_slow(arguments)
    waiting, running = (fast_groups(groups()) if fast else groups()), []
    # Without the slow tests no group of the fast loop is near its full run's peak; FAST_PEAK_GB bounds them all.
    group_peak = (lambda group: FAST_PEAK_GB) if fast else peak_gb
    budget = MEMORY_BUDGET_GB if fast else MEMORY_BUDGET_GB - SERVER_RESERVE_GB
    totals, failed_groups, started, peak, measured = {}, [], time.time(), 0, {}
    next_sample = 0.0
    total_groups = len(waiting)
    print(f"suite: {total_groups} pytest runs, up to {jobs} at a time", flush=True)

    def may_start(group):
        if not running:
            return True
        if len(running) >= jobs:
            return False
        return sum(group_peak(run.group) for run in running) + group_peak(group) <= budget

    while waiting or running:
        for group in list(waiting):
            if may_start(group):
                waiting.remove(group)
                running.append(_Run(group, arguments, xml_directory, fresh, output_directory))
                next_sample = 0.0  # read at once: a group shorter than the interval is measured too
            elif len(running) >= jobs:
                break
        if time.time() >= next_sample:
            next_sample = time.time() + MEMORY_SAMPLE_SECONDS
            memory = tree_rss([os.getpid()] + [run.process.pid for run in running])
            peak = max(peak, memory.get(os.getpid(), 0))  # the groups, and the server they are forked from
            for run in running:
                run.peak = max(run.peak, memory.get(run.process.pid, 0))
        for run in list(running):
            status = run.process.poll()
            if status is None:
                continue
            running.remove(run)
            output = run.output()
            print(f"=== pytest {run.group}\n{output}", end="" if output.endswith("\n") else "\n")
            print(f"--- {run.group}: exit {status}, {time.time() - run.started:.0f} s, "
                  f"peak {_gigabytes(run.peak)} (its process tree)", flush=True)
            measured[run.group] = (run.peak, time.time() - run.started)
            for word, number in summary_counts(output).items():
                totals[word] = totals.get(word, 0) + number
            if status not in (0, NO_TESTS):
                failed_groups.append((run.group, status, failure_excerpt(output)))
        time.sleep(0.5)
    shutil.rmtree(output_directory, ignore_errors=True)
    minutes, seconds = divmod(int(time.time() - started), 60)
    # Repeated at the end, where a log cut to its tail (CI's) still shows what failed and why.
    for group, status, excerpt in failed_groups:
        print(f"FAILED GROUP (exit {status}): {group}\n{excerpt}")
    print(f"suite: {total_groups} pytest runs, up to {jobs} at a time, in {minutes} min {seconds} s; "
          f"peak {_gigabytes(peak)} in all test processes together")
    failed = totals.get("failed", 0) + totals.get("errors", 0)
    print(f"total: {totals.get('passed', 0)} passed, {failed} failed, {totals.get('skipped', 0)} skipped", flush=True)
    if record:  # every group ran to its end: what they cost is measured, whether their tests passed or not
        write_profile(measured)
        print(f"suite: recorded each group's peak and time in {PROFILE.relative_to(ROOT.parent)}")
    if failed_groups or failed:
        return 1
    return 0 if totals.get("passed", 0) else NO_TESTS


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
