"""Runs the test suite as one pytest process per group of test files, and prints one total line.

TensorFlow keeps what a test builds (graphs, traced functions, loaded
SavedModels) for the life of the process, so one pytest process over the
whole suite grows past 20 GB. One process per group gives that memory back
between groups; each group is one directory of tests/ or a few of the
top-level test files. Arguments are passed to every pytest run (e.g.
`-m "not slow"` for the fast loop, `-x`, `-k NAME`).

Exit status: 0 when every group passed (a group that the arguments leave
without tests counts as passed), 1 when any failed, 5 when no test ran at all.
The last line is the total over the groups, as `total: N passed, N failed, N skipped`.

    python tests/run_suite.py                 # the whole suite (CI)
    python tests/run_suite.py -m "not slow"   # the fast loop
"""

import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent
TOP_LEVEL_PER_GROUP = 6  # top-level test files per process
NO_TESTS = 5  # pytest's exit status when nothing was collected (or all deselected)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)")


def groups():
    """Lists of test paths, relative to the repository: each directory of tests/, then the top-level files."""
    directories = sorted(path for path in ROOT.iterdir() if path.is_dir() and any(path.glob("test_*.py")))
    files = sorted(ROOT.glob("test_*.py"))
    chunks = [files[i:i + TOP_LEVEL_PER_GROUP] for i in range(0, len(files), TOP_LEVEL_PER_GROUP)]
    relative = lambda path: str(path.relative_to(ROOT.parent))  # noqa: E731
    return [[relative(directory)] for directory in directories] + [[relative(f) for f in chunk] for chunk in chunks]


def summary_counts(output):
    """`{"passed": n, ...}` from the last summary line of a pytest run's output."""
    lines = [line for line in output.splitlines() if _COUNT.search(line) and (" in " in line or line.startswith("="))]
    counts = {}
    for number, word in _COUNT.findall(lines[-1] if lines else ""):
        word = "errors" if word.startswith("error") else word
        counts[word] = counts.get(word, 0) + int(number)
    return counts


def main(arguments):
    totals, failed_groups, started = {}, [], time.time()
    for group in groups():
        print(f"=== pytest {' '.join(group)}", flush=True)
        process = subprocess.Popen([sys.executable, "-m", "pytest", *group, *arguments], cwd=ROOT.parent,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = []
        for line in process.stdout:
            sys.stdout.write(line)
            output.append(line)
        status = process.wait()
        counts = summary_counts("".join(output))
        for word, number in counts.items():
            totals[word] = totals.get(word, 0) + number
        if status not in (0, NO_TESTS):
            failed_groups.append((group, status))
    minutes, seconds = divmod(int(time.time() - started), 60)
    for group, status in failed_groups:
        print(f"FAILED GROUP (exit {status}): {' '.join(group)}")
    print(f"suite: {len(groups())} pytest runs in {minutes} min {seconds} s")
    failed = totals.get("failed", 0) + totals.get("errors", 0)
    print(f"total: {totals.get('passed', 0)} passed, {failed} failed, {totals.get('skipped', 0)} skipped", flush=True)
    if failed_groups or failed:
        return 1
    return 0 if totals.get("passed", 0) else NO_TESTS


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
