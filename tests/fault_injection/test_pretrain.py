"""`bert-keras pretrain` killed after training (before the export), between the modules and before the swap."""

import os

import pytest

from bert_keras.export import read_module_pair
from bert_keras._files import MARKER
from tests.fault_injection._harness import (
    KILLED,
    TOLERANCE,
    backup_epoch,
    entries,
    marker,
    max_difference,
    output_state,
    pair_outputs,
    staged_dir,
)
from tests.fault_injection.conftest import PRETRAIN_BACKUP_POINTS, PRETRAIN_POINTS

pytestmark = [pytest.mark.fault_injection, pytest.mark.slow]

# What each kill leaves staged (`.partial-pretrained-*`): nothing, half a pair, or a whole pair not in place.
# A staging directory carries the marker from its creation (`complete: false` until the write is whole).
STAGED = {"before-export": None, "between-modules": [MARKER, "encoder"], "before-replace:pretrained": [MARKER, "encoder", "preprocess"]}


@pytest.fixture(scope="module")
def reference(pretrain_reference):
    workdir, finished = pretrain_reference.result()
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "step 4/4" in finished.stdout
    out = str(workdir / "pretrained")
    assert sorted(os.listdir(out)) == [MARKER, "encoder", "preprocess"]  # the backup went with the swap
    return pair_outputs(out)


def describe(staged):
    text = "run dir (marker `complete: false`) with its epoch-2 backup, no module"
    if staged:
        text += f"; `.partial-pretrained-*` holding {', '.join(s for s in staged if s != MARKER)}; stale lock"
    return text


@pytest.mark.parametrize("index, point", enumerate(PRETRAIN_POINTS))
def test_killed_pretraining_keeps_its_backup_and_the_rerun_only_exports(index, point, pretrain_chain, reference, fault_table):
    chain = pretrain_chain.result()
    kill = chain.kills[index]
    assert kill.killed.returncode == KILLED, kill.killed.stderr[-3000:]
    staged = STAGED[point]
    assert entries(kill.snapshot) == ([".partial-pretrained-*", ".pretrained.lock"] if staged else []) + ["pretrained"]
    if staged:
        assert entries(staged_dir(kill.snapshot)) == staged
    kept = os.path.join(kill.snapshot, "pretrained")
    # The run's directory: still marked as a run in progress, with its whole backup, and no module of the pair.
    assert entries(kept) == [MARKER, "backup"]
    assert marker(kept)["kind"] == "pretraining_run" and marker(kept)["complete"] is False
    assert read_module_pair(kept) is None
    assert backup_epoch(os.path.join(kept, "backup")) == 2
    # The first run trained all 4 steps; every run after it resumed after the last epoch and trained none.
    assert ("step 4/4" in kill.killed.stdout) == (index == 0) and ("step " in kill.killed.stdout) == (index == 0)

    after = chain.after(index)
    assert "step " not in after.stdout
    if index + 1 < len(chain.kills):
        assert after.returncode == KILLED
        fault_table.append(["pretrain", point, describe(staged), f"resumed, no step retrained; killed in turn at "
                            f"{chain.kills[index + 1].point}", "(see the next row)"])
        return
    assert after.returncode == 0, after.stderr[-3000:]
    assert entries(chain.workdir) == ["pretrained"]
    out = os.path.join(chain.workdir, "pretrained")
    assert output_state(out, "module_pair") == "complete" and marker(out)["steps"] == 4
    assert sorted(os.listdir(out)) == [MARKER, "encoder", "preprocess"]  # the backup went with the swap
    difference = max_difference(pair_outputs(out), reference)
    assert difference <= TOLERANCE
    fault_table.append(["pretrain", point, describe(staged), "exit 0, no step retrained; backup gone with the swap",
                        f"equal: max abs diff {difference:.1e} (preprocess and encoder outputs, mlm logits, variables)"])


@pytest.mark.parametrize("index, point", enumerate(PRETRAIN_BACKUP_POINTS))
def test_pretraining_killed_inside_a_backup_write_resumes_exactly(index, point, pretrain_backup_chain, reference, fault_table):
    chain = pretrain_backup_chain.result()
    kill = chain.kills[index]
    assert kill.killed.returncode == KILLED, kill.killed.stderr[-3000:]
    backup = os.path.join(kill.snapshot, "pretrained", "backup")
    epoch = int(point.rsplit(":", 1)[1])
    assert backup_epoch(backup) == (epoch - 1 or None)  # the snapshot being written is not taken for one
    assert f".partial-epoch-{epoch:04d}-*" in entries(backup)
    after = chain.after(index)
    if index + 1 < len(chain.kills):
        assert after.returncode == KILLED
        fault_table.append(["pretrain", point, f"epoch {epoch}'s snapshot staged, not in place",
                            f"resumed from epoch {epoch - 1}; killed in turn at {chain.kills[index + 1].point}", "(see the next row)"])
        return
    assert after.returncode == 0, after.stderr[-3000:]
    assert "step 4/4" in after.stdout and "step 5/" not in after.stdout  # no step trained twice
    difference = max_difference(pair_outputs(os.path.join(chain.workdir, "pretrained")), reference)
    assert difference <= TOLERANCE
    fault_table.append(["pretrain", point, f"epoch {epoch}'s snapshot staged, not in place",
                        f"exit 0, resumed from epoch {epoch - 1}", f"equal: max abs diff {difference:.1e}"])
