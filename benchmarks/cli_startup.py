"""Start-up time of the command line: `bert-keras --help` and `--version` against importing TensorFlow.

Runs each command N times, alternating, in fresh processes, and writes a table of medians:

    python benchmarks/cli_startup.py --runs 7 --output benchmarks/results/cli_startup.md
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "bert-keras --help": [shutil.which("bert-keras") or "bert-keras", "--help"],
    "bert-keras --version": [shutil.which("bert-keras") or "bert-keras", "--version"],
    "bert-keras presets": [shutil.which("bert-keras") or "bert-keras", "presets"],
    "python -c 'import tensorflow' (what --help no longer pays)": [sys.executable, "-c", "import tensorflow"],
}


def _cpu():
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = re.search(r"model name\s*:\s*(.*)", text)
    flags = sorted(set(re.findall(r"avx512[a-z_0-9]*", text)))
    return f"{model.group(1) if model else 'unknown CPU'}, {os.cpu_count()} cores; {' '.join(flags) or 'no AVX-512'}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--output", default="benchmarks/results/cli_startup.md")
    args = parser.parse_args()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    times = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, command in COMMANDS.items():
            started = time.perf_counter()
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - started)
    lines = [
        "# Command-line start-up",
        "",
        f"`python benchmarks/cli_startup.py --runs {args.runs}`; {_cpu()}. Wall time per command in a fresh process,",
        "commands alternating; median (min-max) of the runs.",
        "",
        "| command | median s | min s | max s |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, values in times.items():
        lines.append(f"| `{name}` | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
