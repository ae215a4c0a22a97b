"""Readers of users' data files; none imports TensorFlow, so the command line reads and checks its input first.

`bert_keras.data.texts`: texts and labelled texts (CSV, TSV, JSON, JSONL, one
text per line), `LabelledText`, `stratified_split`; `bert_keras.data.tagged`:
tagged words (CoNLL, JSONL; BIO, IOB1, BIOES), WNUT-2016; `bert_keras.data.squad`:
questions and answers (SQuAD v1.1 / v2.0, JSONL) and their scores. All three
read records through `bert_keras.data._records`, so the same files are
accepted and bad ones are refused with the same messages. This package imports
none of them: a command imports only the reader it needs.
"""
