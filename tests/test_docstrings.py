"""One doctest pass over the whole package: every docstring example runs and shows what it claims."""

import doctest
import importlib
import pkgutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import bert_keras
from bert_keras import BertEncoder


# Modules whose examples took over 3 s (the real MiniLM, whole exports): left out of the fast loop.
SLOW_MODULES = {"bert_keras.tasks.sentence_encoder", "bert_keras.text.data"}


def _modules():
    names = [info.name for info in pkgutil.walk_packages(bert_keras.__path__, prefix="bert_keras.")]
    return [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_MODULES else name
            for name in sorted(names) if not name.endswith("__main__")]


@pytest.mark.parametrize("module_name", _modules())
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = [t for t in finder.find(module, module_name, globs={}) if t.examples and t.name.startswith(module_name)]
    if not tests:
        pytest.skip(f"{module_name} has no docstring examples")
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for test in tests:
        test.globs = dict(vars(module), np=np, tf=tf, keras=keras, BertEncoder=BertEncoder)
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed in {module_name}"
