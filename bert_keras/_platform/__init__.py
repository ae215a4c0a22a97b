"""Everything in the package that depends on more than documented, portable Python, TensorFlow and Keras API.

Each module names, at its top, the upstream behaviour it relies on; `tests/test_platform.py` audits the sources
(none of it anywhere else) and pins each dependency, so that an upgrade that changes one fails there, by name.

| module | what it depends on |
| --- | --- |
| `keras_private` | private Keras 3 and TensorFlow API (`keras.src`, `tensorflow.python`, private members), each entry with why no public way exists |
| `loading` | what loading an export needs without Keras: private TensorFlow API (a SavedModel loaded without some endpoints, a first call without graph rewrites) and tensorflow-text's op libraries loaded by path |
| `native` | `ctypes`: glibc's `renameat2` (atomic swap of an output), TensorFlow's and tensorflow-text's shared libraries (LiteRT's text kernels) |
| `native_log` | the import system (`sys.meta_path` finders around TensorFlow's first import) and file descriptor 2 (TensorFlow's C++ log lines filtered through a pipe) |
| `tflite_file` | the TFLite flatbuffer schema, and the subgraph names TensorFlow's converter gives a `tf.cond` |
| `text_models` | tensorflow-text's `FastBertNormalizerModel` flatbuffer and darts-clone's double-array trie layout |

The package itself imports nothing here: each user imports the module it needs (`import bert_keras` loads no
TensorFlow through this folder).
"""
