"""The kinds of loaded exports, one module each: what turns a signature's arrays into answers, on any engine.

`classifier`, `tagger`, `reader` and `sentence_encoder` each hold one
answering class, mixed with an engine (`bert_keras.export.engine`) into the
loaded export of that kind: `ExportedClassifier` (SavedModel) and the LiteRT
classifier answer `predict` through the same code. No module here imports
TensorFlow or LiteRT.
"""
