"""`bert-keras finetune` killed with SIGKILL after random delays: absent or complete, and the rerun's result."""

import os

import pytest

from tests.fault_injection._harness import (
    KILLED,
    TOLERANCE,
    backup_epoch,
    classifier_outputs,
    entries,
    max_difference,
    output_state,
)
from tests.fault_injection.conftest import RANDOM_FRACTIONS

pytestmark = [pytest.mark.fault_injection, pytest.mark.slow]


def landed(snapshot):
    """Where the run was when it was killed, read from what it left."""
    backup = os.path.join(snapshot, ".clf.backup")
    if output_state(os.path.join(snapshot, "clf"), "classifier") == "complete":
        return "export in place, " + ("backup not yet removed" if os.path.exists(backup) else "backup removed (it was exiting)")
    if not os.path.exists(backup):
        return "no backup yet"
    parts = [f"phase 1 at epoch {backup_epoch(os.path.join(backup, 'head')) or 0}"]
    if backup_epoch(os.path.join(backup, "full")):
        parts.append(f"phase 2 at epoch {backup_epoch(os.path.join(backup, 'full'))}")
    if any(name.startswith(".partial-clf-") for name in os.listdir(snapshot)):
        parts.append("export staged")
    return "backup: " + ", ".join(parts)


@pytest.mark.parametrize("index", range(len(RANDOM_FRACTIONS)))
def test_random_kill_leaves_absent_or_complete_and_the_rerun_ends_the_same(index, random_kills, finetune_reference_outputs, fault_table):
    chain = random_kills[index].result()
    (kill,) = chain.kills
    assert kill.killed.returncode in (KILLED, 0), kill.killed.stderr[-3000:]
    state = output_state(os.path.join(kill.snapshot, "clf"), "classifier")
    assert state in ("absent", "complete")
    if state == "complete":  # the export was in place: the same command refuses to replace it
        # (A loaded machine can end the run before its kill.)
        refusal = "already holds an output of bert-keras; pass --force to replace it"
        assert chain.final.returncode == 2 and refusal in chain.final.stderr, chain.final.stderr[-3000:]
        rerun = "exit 2: already holds an output"
        # A kill between the export and the removal of the backup leaves the backup (see the report), and a kill
        # before the run ends its stale lock (taken when the run starts).
        assert entries(chain.workdir) in (["clf"], [".clf.lock", "clf"], [".clf.backup", "clf"], [".clf.backup", ".clf.lock", "clf"])
    else:
        assert kill.killed.returncode == KILLED
        assert chain.final.returncode == 0, chain.final.stderr[-3000:]
        rerun = "exit 0, " + ("resumed" if "Resuming from the backup" in chain.final.stdout else "started over")
        assert entries(chain.workdir) == ["clf"]
    out = os.path.join(chain.workdir, "clf")
    assert output_state(out, "classifier") == "complete"
    difference = max_difference(classifier_outputs(out), finetune_reference_outputs)
    assert difference <= TOLERANCE
    fault_table.append(["finetune", f"SIGKILL after {float(kill.point):.1f} s ({RANDOM_FRACTIONS[index]:.2f} of a run)",
                        f"clf {state}; {landed(kill.snapshot)}", rerun, f"equal: max abs diff {difference:.1e}"])
