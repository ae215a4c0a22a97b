import http.server
import os
import tarfile
import threading

import keras
import pytest
import tensorflow as tf

from bert_keras import hub
from tests.helpers import assert_close
from tests.hub.conftest import encoder_inputs


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    hits = []

    def do_GET(self):  # noqa: N802
        type(self).hits.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server(tmp_path):
    served = tmp_path / "www"
    served.mkdir()
    _CountingHandler.hits = []
    handler = lambda *a, **k: _CountingHandler(*a, directory=str(served), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_compressed_module_by_url_is_downloaded_once(encoder_dir, http_server, tmp_path, monkeypatch):
    served, base_url = http_server
    with tarfile.open(served / "encoder.tar.gz", "w:gz") as archive:
        for name in os.listdir(encoder_dir):
            archive.add(os.path.join(encoder_dir, name), arcname=name)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(cache))
    url = f"{base_url}/encoder.tar.gz"

    first = hub.KerasLayer(url)
    second = hub.load(url)
    assert len(_CountingHandler.hits) == 1
    assert _CountingHandler.hits[0].startswith("/encoder.tar.gz")
    assert len(os.listdir(cache)) >= 1
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


def test_unreachable_url_names_the_url_and_the_cache_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "cache"))
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/missing/encoder.tar.gz"
    with pytest.raises(OSError, match=rf"Could not fetch the module at {url}.*TFHUB_CACHE_DIR"):
        hub.load(url)


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
