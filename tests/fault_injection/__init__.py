"""Fault injection: runs killed with SIGKILL at named points and at random times, then run again.

Every test here is marked `fault_injection` (run them alone with `pytest -m fault_injection`).
A run is a process of the `bert-keras` command line (or a small driver of the Python API), forked
from one that has TensorFlow imported (`tests/forked.py`);
`BERT_KERAS_FAULT_POINT` stops it at a named point (`bert_keras._faults.fault_point`).
Set `BERT_KERAS_FAULT_TABLE=path.md` to write the table of what each kill left and what the rerun did.
"""
