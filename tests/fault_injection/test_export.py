"""`bert_keras.export.export_classifier` (a Python driver) killed before its swap, over an earlier export."""

import os

import pytest

from tests.fault_injection._harness import KILLED, TOLERANCE, classifier_outputs, entries, marker, max_difference, output_state

pytestmark = [pytest.mark.fault_injection, pytest.mark.slow]


def test_kill_before_the_swap_keeps_the_earlier_export(export_runs, fault_table):
    (finished, reference), chain = export_runs.result()
    assert finished.returncode == 0, finished.stderr[-3000:]
    expected = classifier_outputs(reference)
    (kill,) = chain.kills
    assert kill.killed.returncode == KILLED, kill.killed.stderr[-3000:]
    assert entries(kill.snapshot) == [".clf.lock", ".partial-clf-*", "clf"]
    kept = os.path.join(kill.snapshot, "clf")
    assert output_state(kept, "classifier") == "complete" and marker(kept)["earlier_output"] is True  # untouched
    assert max_difference(classifier_outputs(kept), expected) <= TOLERANCE  # and it loads

    assert chain.final.returncode == 0, chain.final.stderr[-3000:]
    assert entries(chain.workdir) == ["clf"]
    out = os.path.join(chain.workdir, "clf")
    assert output_state(out, "classifier") == "complete" and "earlier_output" not in marker(out)  # replaced
    difference = max_difference(classifier_outputs(out), expected)
    assert difference <= TOLERANCE
    fault_table.append(["export_classifier (API), overwrite=True over an earlier export", kill.point,
                        "earlier export whole, untouched, loads; `.partial-clf-*` whole; stale lock",
                        "exit 0; earlier export replaced, staging and lock removed", f"equal: max abs diff {difference:.1e}"])
