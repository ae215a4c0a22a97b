"""The fault-injection hook of the writers and the training runs: a chosen point kills the process, for tests."""

import logging
import os

logger = logging.getLogger(__name__)


FAULT_VARIABLE = "BERT_KERAS_FAULT_POINT"


def fault_point(point):
    """Test hook: `BERT_KERAS_FAULT_POINT=NAME` kills this process with SIGKILL at the point `NAME`.

    Lets the fault-injection tests stop a run at a chosen place, deterministically.
    """
    wanted = os.environ.get(FAULT_VARIABLE)
    if wanted and (wanted == point or wanted == point.split(":")[0]):
        logger.warning("Fault point %s reached: killing this process (%s is set).", point, FAULT_VARIABLE)
        os.kill(os.getpid(), 9)

