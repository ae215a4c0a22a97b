import hashlib
import http.server
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import threading

import keras
import pytest
import tensorflow as tf

from bert_keras import hub
from tests.helpers import assert_close
from tests.hub.conftest import encoder_inputs


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    hits = []
    cut_short = False  # send the full Content-Length but half the body

    def do_GET(self):  # noqa: N802
        type(self).hits.append(self.path)
        super().do_GET()

    def copyfile(self, source, outputfile):
        if not type(self).cut_short:
            return super().copyfile(source, outputfile)
        data = source.read()
        outputfile.write(data[: len(data) // 2])

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server(tmp_path):
    served = tmp_path / "www"
    served.mkdir()
    _CountingHandler.hits = []
    _CountingHandler.cut_short = False
    handler = lambda *a, **k: _CountingHandler(*a, directory=str(served), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _serve_module(served, module_dir, name="encoder.tar.gz"):
    """Writes `module_dir` as a .tar.gz into the served folder; returns the archive's SHA-256."""
    with tarfile.open(served / name, "w:gz") as archive:
        for entry in os.listdir(module_dir):
            archive.add(os.path.join(module_dir, entry), arcname=entry)
    return hashlib.sha256((served / name).read_bytes()).hexdigest()


def _entry(cache, url):
    return os.path.join(cache, hashlib.sha1(url.encode("utf8")).hexdigest())


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(path))
    return path


@pytest.mark.slow
def test_compressed_module_by_url_is_downloaded_once(encoder_dir, http_server, cache):
    served, base_url = http_server
    digest = _serve_module(served, encoder_dir)
    url = f"{base_url}/encoder.tar.gz"

    first = hub.KerasLayer(url, sha256=digest)
    second = hub.load(url, sha256=digest)
    assert len(_CountingHandler.hits) == 1
    assert _CountingHandler.hits[0].startswith("/encoder.tar.gz")
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    with open(os.path.join(_entry(cache, url), ".bert_keras_output.json")) as f:
        marker = json.load(f)
    assert (marker["url"], marker["sha256"], marker["complete"]) == (url, digest, True)
    inputs = {k: tf.constant(v) for k, v in encoder_inputs().items()}
    reference = hub.load(encoder_dir)(inputs)["pooled_output"]
    assert_close(first(inputs)["pooled_output"], reference, atol=0)
    assert_close(second(inputs)["pooled_output"], reference, atol=0)


def test_file_url_handle(encoder_dir):
    layer = hub.KerasLayer("file://" + encoder_dir)
    assert len(layer.weights) == 39


def test_missing_path():
    with pytest.raises(FileNotFoundError, match=r"No SavedModel at '/nonexistent/encoder': the path does not exist"):
        hub.KerasLayer("/nonexistent/encoder")


def test_directory_that_is_not_a_saved_model(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"is not a SavedModel: it holds no saved_model.pb. Found: \['notes.txt'\]"):
        hub.load(str(tmp_path))


def test_saved_model_that_is_not_an_encoder(tmp_path):
    x = keras.Input(shape=(3,))
    model = keras.Model(x, keras.layers.Dense(2)(x))
    path = str(tmp_path / "exported")
    model.export(path, verbose=False)
    with pytest.raises(ValueError, match=r"cannot be called.*not a Hub encoder.*signatures: \['serve', 'serving_default'\]"):
        hub.KerasLayer(path)


def test_unreachable_url_names_the_url_and_the_cache_variable(cache):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/missing/encoder.tar.gz"
    with pytest.raises(OSError, match=rf"Could not fetch the module at {url}.*TFHUB_CACHE_DIR"):
        hub.load(url, sha256="0" * 64)


def test_module_with_unregistered_ops(tmp_path):
    class Double(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return tf.identity(x * 2.0)

    path = str(tmp_path / "double")
    tf.saved_model.save(Double(), path)
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    for function in proto.meta_graphs[0].graph_def.library.function:
        for node in function.node_def:
            if node.op == "Identity":
                node.op = "NoSuchOpForTest"
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(proto.SerializeToString())
    with pytest.raises(RuntimeError, match=r"needs the op\(s\) \['NoSuchOpForTest'\].*import the library"):
        hub.load(path)


# The download cache: private, checked, complete entries only, pinned digests.


@pytest.mark.slow
def test_planted_directory_in_the_cache_is_not_used(encoder_dir, preprocess_dir, http_server, cache):
    served, base_url = http_server
    digest = _serve_module(served, encoder_dir)
    url = f"{base_url}/encoder.tar.gz"
    cache.mkdir(mode=0o700)
    shutil.copytree(preprocess_dir, _entry(cache, url))  # a different module (another kind of output) where the URL's entry goes

    with pytest.raises(FileExistsError, match=r"holds a bert_keras 'preprocess' output, not a 'hub_download' one"):
        hub.KerasLayer(url, sha256=digest)  # neither used nor replaced: the user removes it
    assert len(_CountingHandler.hits) == 1
    assert sorted(os.listdir(_entry(cache, url))) == sorted(os.listdir(preprocess_dir))


def test_default_cache_is_private_and_per_user(encoder_dir, http_server, tmp_path, monkeypatch):
    served, base_url = http_server
    digest = _serve_module(served, encoder_dir)
    monkeypatch.delenv("TFHUB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    system_temp = tmp_path / "system_temp"
    system_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    url = f"{base_url}/encoder.tar.gz"

    path = hub.resolve(url, sha256=digest)
    expected_cache = tmp_path / "xdg" / "bert_keras" / "hub"
    assert path == _entry(expected_cache, url)
    assert stat.S_IMODE(os.stat(expected_cache).st_mode) == 0o700
    assert os.listdir(system_temp) == []


def test_wrong_sha256_fails_and_leaves_no_cache_entry(encoder_dir, http_server, cache):
    served, base_url = http_server
    digest = _serve_module(served, encoder_dir)
    url = f"{base_url}/encoder.tar.gz"
    with pytest.raises(ValueError, match=rf"has SHA-256 {digest}, but sha256='{'0' * 64}' was pinned; nothing was cached"):
        hub.load(url, sha256="0" * 64)
    assert os.listdir(cache) == []


def test_cached_entry_recorded_with_another_sha256_is_not_used(encoder_dir, http_server, cache):
    served, base_url = http_server
    digest = _serve_module(served, encoder_dir)
    url = f"{base_url}/encoder.tar.gz"
    hub.resolve(url, sha256=digest)
    other = "ab" * 32
    with pytest.raises(ValueError, match=rf"has SHA-256 {digest}, but sha256='{other}' was pinned"):
        hub.resolve(url, sha256=other.upper())
    assert len(_CountingHandler.hits) == 2  # the pin sent it back to the server
    assert hub.resolve(url, sha256=digest) == _entry(cache, url)  # the first entry was left as it was
    assert len(_CountingHandler.hits) == 2


def test_download_cut_short_fails_and_leaves_no_cache_entry(encoder_dir, http_server, cache):
    served, base_url = http_server
    digest = _serve_module(served, encoder_dir)
    _CountingHandler.cut_short = True
    size = (served / "encoder.tar.gz").stat().st_size
    with pytest.raises(OSError, match=rf"Could not fetch the module at http://.*/encoder.tar.gz: the connection closed after {size // 2} of {size} bytes"):
        hub.load(f"{base_url}/encoder.tar.gz", sha256=digest)
    assert os.listdir(cache) == []


def test_plain_http_without_sha256_is_refused(encoder_dir, http_server, cache):
    served, base_url = http_server
    _serve_module(served, encoder_dir)
    with pytest.raises(ValueError, match=r"Refusing to download http://.* over plain http.*Pin the archive's digest with `sha256=`.*use an https URL.*local directory"):
        hub.KerasLayer(f"{base_url}/encoder.tar.gz")
    assert _CountingHandler.hits == []


def _tar_member(name, kind=tarfile.REGTYPE, linkname=""):
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, linkname
    return member


@pytest.mark.parametrize(
    "member, reason",
    [
        (_tar_member("../escape.txt"), "a path with a '..' component"),
        (_tar_member("variables/../../escape.txt"), "a path with a '..' component"),
        (_tar_member("/tmp/escape.txt"), "an absolute path"),
        (_tar_member("passwd", tarfile.SYMTYPE, "/etc/passwd"), "a link (to '/etc/passwd')"),
        (_tar_member("null", tarfile.CHRTYPE), "a device, FIFO or other special file"),
    ],
)
def test_unsafe_tar_member_is_refused(member, reason, encoder_dir, http_server, cache, tmp_path):
    served, base_url = http_server
    with tarfile.open(served / "evil.tar.gz", "w:gz") as archive:
        for name in os.listdir(encoder_dir):
            archive.add(os.path.join(encoder_dir, name), arcname=name)
        archive.addfile(member, io.BytesIO(b"") if member.isfile() else None)
    digest = hashlib.sha256((served / "evil.tar.gz").read_bytes()).hexdigest()
    with pytest.raises(ValueError, match=rf"its member {re.escape(repr(member.name))} is {re.escape(reason)}.*Nothing was cached"):
        hub.load(f"{base_url}/evil.tar.gz", sha256=digest)
    assert [name for name in os.listdir(cache) if not name.endswith(".lock")] == []
    assert not (tmp_path / "escape.txt").exists()


def test_group_writable_cache_dir_is_refused(http_server, cache):
    _, base_url = http_server
    cache.mkdir()
    os.chmod(cache, 0o770)
    with pytest.raises(PermissionError, match=rf"Refusing to use the Hub download cache '{cache}': its mode drwxrwx--- lets group or others write.*TFHUB_CACHE_DIR"):
        hub.load(f"{base_url}/encoder.tar.gz", sha256="0" * 64)
    assert _CountingHandler.hits == []


def test_cache_dir_of_another_user_is_refused(http_server, cache, monkeypatch):
    _, base_url = http_server
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(cache).st_uid + 1)
    with pytest.raises(PermissionError, match=r"Refusing to use the Hub download cache .*: it is owned by uid \d+, not by the current user"):
        hub.load(f"{base_url}/encoder.tar.gz", sha256="0" * 64)
    assert _CountingHandler.hits == []


def test_group_writable_file_in_a_cached_entry_is_refused(encoder_dir, http_server, cache):
    served, base_url = http_server
    digest = _serve_module(served, encoder_dir)
    url = f"{base_url}/encoder.tar.gz"
    entry = hub.resolve(url, sha256=digest)
    os.chmod(os.path.join(entry, "variables"), 0o775)
    with pytest.raises(PermissionError, match=r"Refusing to use a file in the Hub cache entry '.*/variables': its mode drwxrwxr-x"):
        hub.load(url, sha256=digest)
    assert len(_CountingHandler.hits) == 1


def test_invalid_sha256_argument():
    with pytest.raises(ValueError, match=r"Received an invalid value for argument `sha256`, expected .* 64 hexadecimal characters. Received: sha256='abc'"):
        hub.load("https://127.0.0.1/encoder.tar.gz", sha256="abc")


def test_sha256_with_a_local_path(encoder_dir):
    with pytest.raises(ValueError, match=r"`sha256` pins the archive downloaded from an http\(s\) URL; a local path is used as it is"):
        hub.KerasLayer(encoder_dir, sha256="0" * 64)


@pytest.mark.slow
def test_sha256_round_trips_through_get_config(encoder_dir, preprocess_dir, http_server, cache):
    served, base_url = http_server
    encoder_digest = _serve_module(served, encoder_dir)
    preprocess_digest = _serve_module(served, preprocess_dir, "preprocess.tar.gz")
    encoder = hub.KerasLayer(f"{base_url}/encoder.tar.gz", sha256=encoder_digest)
    preprocess = hub.PreprocessLayer(f"{base_url}/preprocess.tar.gz", seq_length=8, sha256=preprocess_digest)
    assert encoder.get_config()["sha256"] == encoder_digest
    assert preprocess.get_config()["sha256"] == preprocess_digest
    encoder_again = hub.KerasLayer.from_config(encoder.get_config(), safe_mode=False)
    preprocess_again = hub.PreprocessLayer.from_config(preprocess.get_config(), safe_mode=False)
    assert (encoder_again.sha256, preprocess_again.sha256) == (encoder_digest, preprocess_digest)
    assert len(_CountingHandler.hits) == 2
