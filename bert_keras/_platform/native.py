"""Native libraries the package calls into through `ctypes`: the C library's `renameat2`, and TensorFlow's and
tensorflow-text's shared libraries loaded for LiteRT's custom kernels.

Depends on:
- glibc >= 2.28 exporting `renameat2(olddirfd, oldpath, newdirfd, newpath, flags)` with `RENAME_EXCHANGE` = 2 and
  `AT_FDCWD` = -100 (Linux's values). Elsewhere `rename_exchange` answers False and the caller renames in two steps.
- TensorFlow's wheel holding `libtensorflow_framework.so.2` in its package folder, and tensorflow-text's holding
  `core/pybinds/libpybinds_library_common.so` with the C registerers `TEXT_KERNEL_REGISTERERS` of its LiteRT kernels.
  Where either is missing, `load_text_kernels` answers None and the caller registers through tensorflow-text's module.

Pinned by `tests/test_platform.py`.
"""

import ctypes
import ctypes.util
import errno
import importlib
import importlib.util
import os

RENAME_EXCHANGE = 2
AT_FDCWD = -100
# tensorflow-text's registerers of its LiteRT kernels, C symbols of its pybinds library.
TEXT_KERNEL_REGISTERERS = ("AddFastBertNormalize", "AddFastWordpieceTokenize", "AddByteSplit")


def _libc_renameat2():
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name, use_errno=True).renameat2
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


_renameat2 = _libc_renameat2()


def rename_exchange(a, b):
    """Atomically swaps two paths; False when this system or file system cannot, an `OSError` when the swap fails."""
    if _renameat2 is None:
        return False
    if _renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"Could not swap {a!r} and {b!r}: {os.strerror(code)}")


def text_kernel_libraries():
    """`(framework, kernels)`: the paths of TensorFlow's framework library and tensorflow-text's kernel library,
    found without importing either package; an `OSError` when a wheel does not hold them where expected."""
    try:
        tf_spec, text_spec = importlib.util.find_spec("tensorflow"), importlib.util.find_spec("tensorflow_text")
        framework = os.path.join(tf_spec.submodule_search_locations[0], "libtensorflow_framework.so.2")
        kernels = os.path.join(text_spec.submodule_search_locations[0], "core", "pybinds",
                               "libpybinds_library_common.so")
    except (AttributeError, TypeError, IndexError) as error:
        raise OSError(f"TensorFlow or tensorflow-text is not installed as a package folder ({error})") from None
    return framework, kernels


def load_text_kernels():
    """Loads tensorflow-text's LiteRT kernels' library (and TensorFlow's framework library it links) with global
    symbols, without importing TensorFlow; returns the names of their C registerers, for LiteRT's
    `custom_op_registerers`. An `OSError` when the libraries cannot be loaded."""
    # Python's OpenSSL modules first: TensorFlow's libraries, loaded globally below, carry BoringSSL's symbols, which
    # `_hashlib` and `_ssl` would bind to if loaded after them (a segmentation fault at `import hashlib`, which
    # `import tensorflow` does).
    for name in ("hashlib", "ssl"):
        try:
            importlib.import_module(name)
        except ImportError:  # a Python built without OpenSSL: nothing to bind
            pass
    for path in text_kernel_libraries():
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return list(TEXT_KERNEL_REGISTERERS)
