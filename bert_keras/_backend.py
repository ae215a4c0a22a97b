"""The backend check that runs when bert_keras is imported."""

import json
import os
import sys


def configured_backend():
    """The Keras backend this process uses, read without importing Keras (and so TensorFlow) when it is not loaded.

    Once `keras` is imported, its own answer. Before, the rule Keras applies
    when it is imported: `KERAS_BACKEND` when set, else the `backend` of
    `$KERAS_HOME/keras.json` (`~/.keras/keras.json`), else `"tensorflow"`.
    Reading it here keeps `import bert_keras` (and `bert-keras --help`) free
    of TensorFlow's start-up time.
    """
    if "keras" in sys.modules and hasattr(sys.modules["keras"], "backend"):
        return sys.modules["keras"].backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def check_backend(backend):
    """Raises an `ImportError` unless `backend` is Keras' TensorFlow backend."""
    if backend != "tensorflow":
        raise ImportError(
            "bert_keras runs on the Keras 3 TensorFlow backend only. "
            f"Received: keras.backend.backend()={backend!r}. "
            "Set the environment variable KERAS_BACKEND=tensorflow before keras is imported."
        )
