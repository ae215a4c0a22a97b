"""The backend check that runs when bert_keras is imported."""


def check_backend(backend):
    """Raises an `ImportError` unless `backend` is Keras' TensorFlow backend."""
    if backend != "tensorflow":
        raise ImportError(
            "bert_keras runs on the Keras 3 TensorFlow backend only. "
            f"Received: keras.backend.backend()={backend!r}. "
            "Set the environment variable KERAS_BACKEND=tensorflow before keras is imported."
        )
