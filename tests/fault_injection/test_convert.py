"""`bert-keras convert` killed between its two modules and before the swap; two converts into one --out."""

import os
import re

import pytest

from bert_keras._files import MARKER
from tests.fault_injection._harness import KILLED, TEXTS, TOLERANCE, entries, max_difference, output_state, pair_outputs, staged_dir
from tests.fault_injection.conftest import CONVERT_POINTS

pytestmark = [pytest.mark.fault_injection, pytest.mark.slow]

# What each kill leaves staged (`.partial-modules-*`): half a pair, or a whole one not yet in place.
# A staging directory carries the marker from its creation (`complete: false` until the write is whole).
STAGED = {"between-modules": [MARKER, "encoder"], "before-replace:modules": [MARKER, "encoder", "preprocess"]}


@pytest.fixture(scope="module")
def reference_outputs(reference_pair):
    return pair_outputs(reference_pair.result())


def test_two_converts_into_one_out_one_wins_the_other_refuses(concurrent_convert, reference_outputs, fault_table):
    (first, second), watcher, out = concurrent_convert.result()
    winner, loser = sorted((first, second), key=lambda finished: finished.returncode)
    assert (winner.returncode, loser.returncode) == (0, 2), (first.stderr[-2000:], second.stderr[-2000:])
    assert "Wrote " in winner.stdout
    locked = re.search(r"Another process \(pid \d+\) is writing '.*modules'; wait for it to finish", loser.stderr)
    after = "already holds an output of bert-keras; pass --force to replace it" in loser.stderr
    assert locked or after, loser.stderr[-2000:]
    assert watcher.problems == []  # never half a pair, whenever it was looked at
    assert entries(os.path.dirname(out)) == ["modules"]
    assert output_state(out, "module_pair") == "complete"
    assert reference_outputs["pooled_output"].shape == (len(TEXTS), 16)  # it loads and runs: the other tests' reference
    how = "refused: another process is writing" if locked else "refused after: already holds an output"
    fault_table.append(["convert, twice at once into one --out", "(no kill)", f"one whole pair ({watcher.seen} looks while "
                        "they ran, none at half a pair)", f"one exit 0, one exit 2 ({how})", "(this is the reference)"])


@pytest.mark.parametrize("index, point", enumerate(CONVERT_POINTS))
def test_killed_convert_leaves_no_pair_and_the_rerun_converts(index, point, convert_chain, reference_outputs, fault_table):
    chain = convert_chain.result()
    kill = chain.kills[index]
    assert kill.killed.returncode == KILLED, kill.killed.stderr[-2000:]
    # No --out at all (the stale staging of an earlier kill is gone): whatever was written is staged under a
    # name no reader takes, next to the lock file the killed process could not remove.
    assert entries(kill.snapshot) == [".modules.lock", ".partial-modules-*"]
    assert entries(staged_dir(kill.snapshot)) == STAGED[point]

    after = chain.after(index)
    if index + 1 < len(chain.kills):
        assert after.returncode == KILLED and "[3/3] write the preprocess module" in after.stdout
        fault_table.append(["convert", point, f"no --out; `.partial-modules-*` holding {', '.join(STAGED[point])}; stale lock",
                            f"reran from the start, killed in turn at {chain.kills[index + 1].point}", "(see the next row)"])
        return
    assert after.returncode == 0, after.stderr[-2000:]
    assert entries(chain.workdir) == ["modules"]  # staging and lock files gone
    out = os.path.join(chain.workdir, "modules")
    assert output_state(out, "module_pair") == "complete"
    difference = max_difference(pair_outputs(out), reference_outputs)
    assert difference <= TOLERANCE
    fault_table.append(["convert", point, f"no --out; `.partial-modules-*` holding {', '.join(STAGED[point])}; stale lock",
                        "exit 0; staging and lock removed",
                        f"equal: max abs diff {difference:.1e} (preprocess and encoder outputs, mlm logits, variables)"])
