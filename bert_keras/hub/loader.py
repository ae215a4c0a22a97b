"""Resolving Hub handles and loading SavedModels, with tensorflow-text ops registered first.

Modules named by an http(s) URL are downloaded once into a cache that only the
current user can write. DESIGN said to resolve handles with tensorflow-hub, but
`tensorflow_hub.resolve` caches under a shared, predictable path (the URL's
sha1 under the system's temp directory) and uses whatever directory it finds
there, unchecked; so the download, the checks and the cache are done here:

1. The cache is `$TFHUB_CACHE_DIR` when set, else `$XDG_CACHE_HOME/bert_keras/hub`
   (`~/.cache/bert_keras/hub`); it is created with mode 0700, and refused when it
   (or an entry in it) is not owned by the current user or is writable by group
   or others.
2. `http://` is refused unless the archive's SHA-256 is pinned (`sha256=`); a
   redirect away from https is refused likewise.
3. The archive is downloaded into an anonymous temporary file, hashed, checked
   against the pinned digest, and its members are checked (no absolute paths,
   no `..`, no links or special files) before anything is extracted.
4. It is extracted into a staging directory that replaces the entry in one step
   (`bert_keras._files.staged_directory`), with a marker recording the URL and the
   archive's SHA-256. An entry is used only when its marker is complete, names
   the URL and, when a digest is pinned, records that digest.
"""

import gzip
import hashlib
import http.client
import logging
import os
import re
import stat
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib

import tensorflow as tf

# register_text_ops: `bert_keras.hub.register_text_ops`, as before.
from bert_keras._platform.loading import load_saved_model, register_text_ops  # noqa: F401
from bert_keras._files import MARKER, OutputLockedError, read_marker, staged_directory

logger = logging.getLogger(__name__)

CACHE_VARIABLE = "TFHUB_CACHE_DIR"
CACHE_KIND = "hub_download"
_COMPRESSED_FORMAT_QUERY = ("tf-hub-format", "compressed")  # what tfhub.dev and Kaggle expect
_DOWNLOAD_TIMEOUT_S = 60
_LOCK_WAIT_S = 600
_CHUNK_BYTES = 1 << 20
_SHA256_PATTERN = re.compile(r"[0-9a-fA-F]{64}")


def _is_url(handle):
    return handle.startswith(("http://", "https://"))


def _check_sha256(sha256):
    if sha256 is None:
        return None
    if not isinstance(sha256, str) or not _SHA256_PATTERN.fullmatch(sha256):
        raise ValueError(
            "Received an invalid value for argument `sha256`, expected the SHA-256 digest of the "
            f"module's archive as 64 hexadecimal characters. Received: sha256={sha256!r}"
        )
    return sha256.lower()


def _cache_dir():
    """The download cache, created private (0700) when missing; refused when not private."""
    path = os.environ.get(CACHE_VARIABLE)
    if not path:
        base = os.environ.get("XDG_CACHE_HOME")
        if not base or not os.path.isabs(base):  # the XDG spec says to ignore relative paths
            base = os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "bert_keras", "hub")
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
    _check_private(path, "the Hub download cache")
    return path


def _check_private(path, what, follow_symlinks=True):
    """Raises `PermissionError` if `path` is not owned by this user or is writable by group or others."""
    info = os.stat(path, follow_symlinks=follow_symlinks)
    problem = None
    if info.st_uid != os.geteuid():
        problem = f"it is owned by uid {info.st_uid}, not by the current user (uid {os.geteuid()})"
    elif not stat.S_ISLNK(info.st_mode) and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"its mode {stat.filemode(info.st_mode)} lets group or others write to it"
    if problem:
        raise PermissionError(
            f"Refusing to use {what} {path!r}: {problem}, so someone else could replace a module "
            f"with code of their own. Set {CACHE_VARIABLE} to a directory that only you can write "
            "(it is created with mode 0700 when missing), or fix the ownership and mode (`chmod go-w`)."
        )


def _check_private_tree(entry):
    _check_private(entry, "the Hub cache entry")
    for root, dirs, files in os.walk(entry):
        for name in dirs + files:
            _check_private(os.path.join(root, name), "a file in the Hub cache entry", follow_symlinks=False)


def _remove_group_other_write(path):
    info = os.lstat(path)
    if not stat.S_ISLNK(info.st_mode):
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))


def _make_tree_private(directory):
    # Extracted directories and the marker get the umask's mode, which may let the group write.
    _remove_group_other_write(directory)
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            _remove_group_other_write(os.path.join(root, name))


def _is_cached(entry, url, sha256):
    """Whether `entry` is a complete download of `url` (with digest `sha256`, when given)."""
    if not os.path.lexists(entry):
        return False
    _check_private_tree(entry)
    marker = read_marker(entry)
    if not marker or marker.get("kind") != CACHE_KIND or marker.get("url") != url:
        logger.warning("Not using %s for %s: it is not a complete download of that URL.", entry, url)
        return False
    if sha256 is not None and marker.get("sha256") != sha256:
        logger.info("Cached %s has SHA-256 %s, not the pinned %s; downloading again.", url, marker.get("sha256"), sha256)
        return False
    return True


class _HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects, but not away from https unless the archive's digest is pinned."""

    def __init__(self, pinned):
        super().__init__()
        self._pinned = pinned

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not self._pinned and urllib.parse.urlsplit(newurl).scheme != "https":
            raise urllib.error.HTTPError(
                newurl, code, f"refused the redirect to {newurl}: not https, and no sha256 is pinned", headers, fp
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _request_url(url):
    parts = list(urllib.parse.urlparse(url))
    query = urllib.parse.parse_qsl(parts[4])
    query.append(_COMPRESSED_FORMAT_QUERY)
    parts[4] = urllib.parse.urlencode(query)
    return urllib.parse.urlunparse(parts)


def _download(url, archive, sha256):
    """Writes the archive at `url` into the open file `archive`; returns its SHA-256 once checked."""
    opener = urllib.request.build_opener(_HttpsOnlyRedirects(pinned=sha256 is not None))
    digest = hashlib.sha256()
    size = 0
    try:
        with opener.open(_request_url(url), timeout=_DOWNLOAD_TIMEOUT_S) as response:
            expected = response.headers.get("Content-Length")
            while chunk := response.read(_CHUNK_BYTES):
                digest.update(chunk)
                archive.write(chunk)
                size += len(chunk)
        # http.client ends a cut-short body quietly, and tarfile misses a missing gzip trailer.
        if expected is not None and expected.isdigit() and int(expected) != size:
            raise ConnectionError(f"the connection closed after {size} of {expected} bytes")
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as error:
        raise OSError(
            f"Could not fetch the module at {url}: {error}. If this machine is offline, "
            f"copy the module to a local directory and pass that path, or set {CACHE_VARIABLE} "
            "to a cache directory that already holds it."
        ) from error
    archive.flush()
    received = digest.hexdigest()
    if sha256 is not None and received != sha256:
        raise ValueError(
            f"The archive downloaded from {url} has SHA-256 {received}, but sha256={sha256!r} was "
            "pinned; nothing was cached or loaded. If the module was updated on purpose, pin its new "
            "digest; otherwise the download was altered or corrupted on the way."
        )
    return received


def _unsafe_member_reason(member):
    parts = member.name.replace("\\", "/").split("/")
    if member.name.startswith(("/", "\\")) or os.path.isabs(member.name):
        return "an absolute path"
    if ".." in parts:
        return "a path with a '..' component"
    if member.issym() or member.islnk():
        return f"a link (to {member.linkname!r})"
    if not (member.isfile() or member.isdir()):
        return "a device, FIFO or other special file"
    return None


def _described(url):
    return f"downloaded from {url}" if _is_url(url) else repr(url)


def _extract(archive, directory, url):
    """Extracts the tar archive in the open file `archive` into `directory`, after checking every member.

    `url` names where the archive came from, in messages ("downloaded from URL", or a local path).
    """
    archive.seek(0)
    try:
        with tarfile.open(fileobj=archive, mode="r:*") as tar:
            members = tar.getmembers()
            for member in members:
                reason = _unsafe_member_reason(member)
                if reason:
                    raise ValueError(
                        f"Refusing to extract the archive {_described(url)}: its member {member.name!r} "
                        f"is {reason}, which a Hub module never holds. Nothing was cached."
                    )
            # The "data" filter (Python 3.10.12+, 3.11.4+) checks again and drops setuid and write bits for others.
            tar.extractall(directory, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    except getattr(tarfile, "FilterError", ()) as error:
        raise ValueError(f"Refusing to extract the archive {_described(url)}: {error}. Nothing was cached.") from error
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ValueError(
            f"The file {_described(url)} is not a readable tar archive ({error}). A module archive must "
            "be a compressed (.tar.gz) Hub module."
        ) from error


class _AlreadyCached(Exception):
    """Another process finished the same download while this one waited; nothing to write."""


def _install(archive, entry, url, sha256, source=None):
    """Extracts `archive` into the cache `entry` in one step, waiting while another process writes it.

    `source`: how messages name the archive (defaults to "downloaded from URL").
    """
    deadline = time.monotonic() + _LOCK_WAIT_S
    while True:
        try:
            info = {"url": url, "sha256": sha256}
            with staged_directory(entry, overwrite=True, kind=CACHE_KIND, info=info, argument=f"cache entry for {url}") as staging:
                if _is_cached(entry, url, sha256):
                    raise _AlreadyCached
                _extract(archive, staging, url if source is None else source)
                _make_tree_private(staging)
        except _AlreadyCached:
            return
        except OutputLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            continue
        _remove_group_other_write(os.path.join(entry, MARKER))
        return


def unpack_archive(path):
    """A local module archive (`.tar.gz`), unpacked once into the private cache; returns the entry's directory.

    The same cache, checks and staged write as a download (module docstring):
    the entry is keyed by the archive's SHA-256, its marker records that
    digest, and an entry that is not private or not a complete unpacking of
    that very archive is never used. Members are checked before extraction.

    Raises:
        ValueError: the archive is not a readable tar archive, or holds a member a module never holds.
        PermissionError: the cache, or the entry, could be written by someone else.
    """
    path = os.path.abspath(os.fspath(path))
    cache = _cache_dir()
    with open(path, "rb") as archive:
        digest = hashlib.sha256()
        while chunk := archive.read(_CHUNK_BYTES):
            digest.update(chunk)
        digest = digest.hexdigest()
        handle = f"archive:sha256:{digest}"  # the same content from any path is one entry
        entry = os.path.join(cache, hashlib.sha1(handle.encode("utf8")).hexdigest())
        if _is_cached(entry, handle, digest):
            logger.info("Using the unpacked copy of %s in %s", path, entry)
            return entry
        logger.info("Unpacking %s into %s", path, entry)
        _install(archive, entry, handle, digest, source=path)
    return entry


def _resolve_url(url, sha256):
    if url.startswith("http://") and sha256 is None:
        raise ValueError(
            f"Refusing to download {url} over plain http: anyone on the way could replace the module, "
            "which is a program. Pin the archive's digest with `sha256=` (e.g. "
            "`hub.KerasLayer(url, sha256='...')`; `sha256sum module.tar.gz` prints it), use an https URL, "
            "or download the module yourself and pass its local directory."
        )
    cache = _cache_dir()
    entry = os.path.join(cache, hashlib.sha1(url.encode("utf8")).hexdigest())
    if _is_cached(entry, url, sha256):
        logger.info("Using the cached download of %s in %s", url, entry)
        return entry
    logger.info("Downloading %s into %s", url, entry)
    with tempfile.TemporaryFile(dir=cache) as archive:  # no name: removed even if this process is killed
        digest = _download(url, archive, sha256)
        _install(archive, entry, url, digest)
    return entry


def resolve(handle, sha256=None):
    """Returns a local directory for a handle: a path, `file://` path or http(s) URL.

    URLs must point to compressed (`.tar.gz`) modules. They are downloaded once
    into a cache only the current user can write: `$TFHUB_CACHE_DIR` when set,
    else `$XDG_CACHE_HOME/bert_keras/hub` (`~/.cache/bert_keras/hub`), created
    with mode 0700. A cache directory or entry that another user owns, or that
    group or others can write, is refused.

    Args:
        handle: str or path. A SavedModel directory, a `file://` path, or an
            http(s) URL of a compressed module.
        sha256: optional str. The SHA-256 digest (64 hexadecimal characters)
            of the archive at a URL `handle`. The download must match it, and
            a cached copy is used only if it was recorded with it. Required
            for `http://` URLs. Defaults to `None`.

    Returns:
        The path of the module's directory.
    """
    handle = os.fspath(handle)
    sha256 = _check_sha256(sha256)
    if handle.startswith("file://"):
        handle = handle[len("file://") :]
    if _is_url(handle):
        return _resolve_url(handle, sha256)
    if sha256 is not None:
        raise ValueError(
            "`sha256` pins the archive downloaded from an http(s) URL; a local path is used as it is. "
            f"Received: handle={handle!r}, sha256={sha256!r}"
        )
    if not os.path.exists(handle):
        parent, name = os.path.split(os.path.normpath(handle))
        hint = ""
        if name in ("encoder", "preprocess"):  # one half of a module pair that bert-keras convert writes
            hint = (f" To write {parent or '.'}/encoder and {parent or '.'}/preprocess from a checkpoint, run "
                    f"`bert-keras convert CHECKPOINT --out {parent or '.'}` (the installed MiniLM checkpoint: "
                    "python -c \"import os; from bert_keras.text.corpora import minilm_vocab_path as p; "
                    "print(os.path.dirname(p()))\").")
        raise FileNotFoundError(
            f"No SavedModel at {handle!r}: the path does not exist. Pass a directory "
            f"that holds saved_model.pb, or an http(s) URL of a compressed module.{hint}"
        )
    return handle


def load(handle, tags=None, options=None, sha256=None):
    """Loads a SavedModel from a handle, after registering tensorflow-text's ops.

    Args:
        handle: a local directory, a `file://` path or an http(s) URL of a
            compressed module.
        tags: optional set of MetaGraph tags, as in `tf.saved_model.load`.
        options: optional `tf.saved_model.LoadOptions`.
        sha256: optional str. The SHA-256 digest of the archive at a URL
            `handle` (see `resolve`).

    Returns:
        The restored object, as `tf.saved_model.load` returns it.
    """
    return load_saved_model(resolve(handle, sha256=sha256), tags=tags, options=options)


def describe(obj):
    """A short text listing a restored object's signatures and callable attributes."""
    signatures = sorted(getattr(obj, "signatures", {}) or {})
    endpoints = sorted(
        name
        for name in dir(obj)
        if not name.startswith("_") and isinstance(getattr(obj, name, None), tf.types.experimental.GenericFunction)
    )
    return f"signatures: {signatures}; callable attributes: {endpoints}"


def check_safe_mode(cls, config, safe_mode=None):
    """Refuses to rebuild a layer that loads a SavedModel while Keras' safe mode is on.

    A SavedModel is a program: its functions run when the layer is built, and
    a `.keras` file names the module by path or URL. As Keras' own
    `TFSMLayer` does, deserializing such a layer needs `safe_mode=False` (or
    `keras.config.enable_unsafe_deserialization()`) from whoever trusts it.
    """
    # Keras' switch, read where a layer is rebuilt (Keras is loaded then): loading a SavedModel imports no Keras.
    from bert_keras._platform.keras_private import in_safe_mode

    safe = safe_mode if safe_mode is not None else in_safe_mode()
    if safe:
        raise ValueError(
            f"Refusing to deserialize `{cls.__name__}` with handle={config.get('handle')!r} in safe mode: "
            "rebuilding it loads and runs that SavedModel, which may run arbitrary code. If you trust the "
            "file and the module it names, load with `safe_mode=False` (e.g. "
            "`keras.saving.load_model(path, safe_mode=False)`) or call "
            "`keras.config.enable_unsafe_deserialization()`."
        )
