"""`bert-keras finetune` killed in phase 1, at its end, between the phases, in phase 2 and before the export's swap."""

import json
import os

import pytest

from tests.fault_injection._harness import (
    KILLED,
    TEXTS,
    TOLERANCE,
    backup_epoch,
    classifier_outputs,
    entries,
    marker,
    max_difference,
    output_state,
)
from bert_keras._files import MARKER
from tests.fault_injection.conftest import EARLY_STOPPING_OPTIONS, EARLY_STOPPING_POINTS, FINETUNE_POINTS

pytestmark = [pytest.mark.fault_injection, pytest.mark.slow]

# What each kill leaves in the backup (.clf.backup): the epochs of phase 1's and phase 2's snapshots (phase 1
# is finished when its snapshot is of its last epoch), and whether the export was staged. Every kill leaves the
# output's lock, taken when the run starts, stale.
LEFT = {
    "epoch-end:head:1": dict(head=1, full=None, staged=False),
    "after-head-phase": dict(head=2, full=None, staged=False),
    "epoch-end:full:1": dict(head=2, full=1, staged=False),
    # Killed while writing epoch 2's snapshot: a staged `.partial-epoch-0002-*` (weights; then weights and
    # state) that is never read; the rerun resumes from epoch 1's.
    "backup-weights-written:full:2": dict(head=2, full=1, staged=False, partial=["model.weights.h5"]),
    "backup-state-written:full:2": dict(head=2, full=1, staged=False, partial=["model.weights.h5", "state.json"]),
    "before-replace:clf": dict(head=2, full=2, staged=True),
}


def describe(left):
    parts = [f"phase 1 backed up at epoch {left['head']}"]
    if left["full"]:
        parts.append(f"phase 2 backed up at epoch {left['full']}")
    if left.get("partial"):
        parts.append(f"epoch 2's snapshot staged with {' and '.join(left['partial'])} only")
    if left["staged"]:
        parts.append("`.partial-clf-*` whole")
    return "no clf; " + ", ".join(parts) + "; a stale lock"


@pytest.mark.parametrize("index, point", enumerate(FINETUNE_POINTS))
def test_killed_finetune_resumes_to_the_uninterrupted_result(index, point, finetune_chain, finetune_reference_outputs, fault_table):
    chain = finetune_chain.result()
    kill = chain.kills[index]
    assert kill.killed.returncode == KILLED, kill.killed.stderr[-3000:]
    left = LEFT[point]
    assert output_state(os.path.join(kill.snapshot, "clf"), "classifier") == "absent"
    # The output's lock is taken when the run starts (a second run of one --out is refused before it trains): stale.
    assert entries(kill.snapshot) == [".clf.backup", ".clf.lock"] + ([".partial-clf-*"] if left["staged"] else [])
    backup = os.path.join(kill.snapshot, ".clf.backup")
    assert backup_epoch(os.path.join(backup, "head")) == left["head"]
    assert backup_epoch(os.path.join(backup, "full")) == left["full"]
    if left.get("partial"):
        full = os.path.join(backup, "full")
        # The phase folder's own marker, the stale lock, the staged snapshot and the last whole one.
        assert entries(full) == [MARKER, ".epoch-0002.lock", ".partial-epoch-0002-*", "epoch-0001"]
        (staged,) = [name for name in os.listdir(full) if name.startswith(".partial-")]
        assert sorted(os.listdir(os.path.join(full, staged))) == sorted([MARKER] + left["partial"])
        assert marker(os.path.join(full, staged))["complete"] is False

    after = chain.after(index)
    assert "Resuming from the backup in" in after.stdout
    for phase, done in (("Head", left["head"]), ("Full", left["full"])):  # each phase says where it resumes
        if done == 1:  # of the 2 epochs of each phase
            assert f"{phase}: resuming at epoch 2 of 2" in after.stdout, after.stdout[-2000:]
    if index + 1 < len(chain.kills):
        assert after.returncode == KILLED
        fault_table.append(["finetune", point, describe(left), f"resumed; killed in turn at {chain.kills[index + 1].point}",
                            "(see the next row)"])
        return
    assert after.returncode == 0, after.stderr[-3000:]
    assert entries(chain.workdir) == ["clf"]  # backup, staging and lock all gone
    out = os.path.join(chain.workdir, "clf")
    assert output_state(out, "classifier") == "complete"
    outputs = classifier_outputs(out)
    probabilities = max_difference({"p": outputs["probabilities"]}, {"p": finetune_reference_outputs["probabilities"]})
    assert probabilities <= TOLERANCE
    difference = max_difference(outputs, finetune_reference_outputs)  # every variable too, the dropout's seed state included
    assert difference <= TOLERANCE
    fault_table.append(["finetune", point, describe(left), "exit 0, resumed; backup, staging and lock removed",
                        f"equal: max abs diff {difference:.1e} (probabilities of {len(TEXTS)} texts, "
                        f"{len(finetune_reference_outputs) - 1} variables)"])


def _history(export):
    with open(os.path.join(export, "assets.extra", "metrics.json")) as f:
        return json.load(f)["history"]


def test_killed_finetune_with_early_stopping_resumes_to_the_uninterrupted_result(early_stopping_runs, fault_table):
    (reference, finished), chain = early_stopping_runs.result()
    assert finished.returncode == 0, finished.stderr[-3000:]
    expected = _history(str(reference / "clf"))
    epochs = EARLY_STOPPING_OPTIONS[EARLY_STOPPING_OPTIONS.index("--epochs") + 1]
    # The case that needs early stopping's state: phase 2 stopped before its last epoch, and not at its first.
    assert 2 <= len(expected["full"]["loss"]) < epochs, expected["full"]
    for index, kill in enumerate(chain.kills):  # killed after phase 2's epoch 1, then (resumed) after its epoch 2
        assert kill.killed.returncode == KILLED, kill.killed.stderr[-3000:]
        assert backup_epoch(os.path.join(kill.snapshot, ".clf.backup", "full")) == index + 1
        after = chain.after(index)
        assert f"Full: resuming at epoch {index + 2} of {epochs}" in after.stdout, after.stdout[-2000:]
    assert chain.final.returncode == 0, chain.final.stderr[-3000:]
    assert entries(chain.workdir) == ["clf"]
    out = os.path.join(chain.workdir, "clf")
    assert _history(out) == expected  # the same epochs trained, with the same losses
    outputs, reference_outputs = classifier_outputs(out), classifier_outputs(str(reference / "clf"))
    difference = max_difference(outputs, reference_outputs)
    assert difference <= TOLERANCE
    fault_table.append(["finetune --early-stopping 1 --epochs 4 (validated on swapped labels)", " then ".join(EARLY_STOPPING_POINTS),
                        "no clf; phase 2 backed up at epoch 1 (the best), then at epoch 2 (stopped, epoch 1's weights restored)",
                        f"exit 0, resumed; phase 2 stopped after epoch {len(expected['full']['loss'])} as uninterrupted",
                        f"equal: max abs diff {difference:.1e} (probabilities and {len(reference_outputs) - 1} variables; "
                        "histories equal)"])


def test_a_link_planted_as_a_phase_folder_is_refused_on_resume(planted_link_runs, finetune_reference_outputs, fault_table):
    """Issue 38, finding 2: the rerun wrote phase 2's snapshots (weights, optimizer state) through the link."""
    workdir, user, killed, refused, finished = planted_link_runs.result()
    assert killed.returncode == KILLED, killed.stderr[-3000:]
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert ".clf.backup/full' (in the backup) is a symbolic link; bert_keras writes through no link" in refused.stderr
    assert "Head: resuming" not in refused.stdout  # refused before phase 1 trained again
    assert sorted(os.listdir(user)) == ["notes.txt"]  # nothing written into the user's directory, nothing removed
    assert (user / "notes.txt").read_text() == "keep me"
    assert finished.returncode == 0, finished.stderr[-3000:]  # the link removed: the backup resumes
    assert "Head: resuming at epoch 2 of 2" in finished.stdout, finished.stdout[-2000:]
    assert entries(workdir) == ["clf"]
    difference = max_difference(classifier_outputs(os.path.join(workdir, "clf")), finetune_reference_outputs)
    assert difference <= TOLERANCE
    fault_table.append(["finetune", "epoch-end:head:1, then `.clf.backup/full` made a link to a user's directory",
                        "no clf; phase 1 backed up at epoch 1; the link", "exit 2 naming the link, the user's directory "
                        "unchanged; with the link removed, exit 0, resumed", f"equal: max abs diff {difference:.1e}"])
