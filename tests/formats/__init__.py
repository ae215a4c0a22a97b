"""Tests of bert_keras.formats: the checkpoint formats' name tables, readers and config checks (the folders are read
through bert_keras.checkpoints, tested in tests/checkpoints)."""
