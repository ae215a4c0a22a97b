"""Contrastive fine-tuning on 2 loopback workers of 16 pairs each trains what 1 replica of 32 pairs trains."""

import json
import sys

import numpy as np
import pytest

from tests.distribute.conftest import check, finish, run_cluster, start

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
TOLERANCE = 1e-5


def _run(mode, inputs, out):
    return [sys.executable, "-m", "tests.distribute._contrastive", mode, str(inputs), str(out)]


def test_two_workers_of_16_pairs_train_what_one_replica_of_32_trains(inputs, tmp_path):
    single, workers = tmp_path / "single", tmp_path / "workers"
    single.mkdir()
    workers.mkdir()
    one = start(_run("single", inputs, single))
    for result in run_cluster([_run("multi-worker", inputs, workers)] * 2):
        check(result)
    check(finish(one))
    ours, theirs = np.load(workers / "contrastive.npz"), np.load(single / "contrastive.npz")
    assert len(ours.files) == len(theirs.files) > 0
    difference = max(float(np.max(np.abs(ours[key] - theirs[key]))) for key in ours.files)
    assert difference <= TOLERANCE, difference
    history = [json.loads((path / "contrastive.json").read_text())["loss"] for path in (workers, single)]
    np.testing.assert_allclose(history[0], history[1], rtol=1e-5)
    assert history[1][-1] < history[1][0]  # it trained
    # Training moved the weights far more than the tolerance: it is trained weights that are equal.
    initial = np.load(single / "initial.npz")
    moved = max(float(np.max(np.abs(theirs[key] - initial[key]))) for key in theirs.files)
    assert moved > 1e-2, moved
