"""Writing a directory so that a failure leaves nothing half-written."""

import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def staged_directory(target, overwrite=False):
    """Yields an empty temporary directory next to `target`; on success it becomes `target`.

    Raises `FileExistsError` before anything is written when `target` exists
    and `overwrite` is False. On an exception the temporary directory is
    removed and `target` is left as it was.
    """
    target = os.fspath(target)
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"{target!r} already exists; pass overwrite=True to replace it.")
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".partial-", dir=parent)
    try:
        yield staging
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
