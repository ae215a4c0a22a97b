"""Serving soak (benchmarks/soak.py): an exported classifier called from 8 threads for 60 s with hostile text."""

import importlib.util
import os

import pytest

SOAK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "soak.py")


def _soak_module():
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _encodable(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@pytest.mark.slow
def test_classifier_export_serves_8_threads_for_60_seconds_alike_and_without_growing(tmp_path):
    soak = _soak_module()
    # Replayed before serving, as a server loads it: the requests before a background warm-up run the graph without
    # TensorFlow's rewrites, equal to the rewritten graph's up to float rounding, not bit for bit.
    classifier = soak.load_classifier(soak.export_tiny_classifier(str(tmp_path / "classifier")), warm_up=True)
    requests = soak.make_requests(soak.normal_texts() + [text for _, text in soak.hostile_texts()])
    result = soak.soak(classifier, requests, threads=8, seconds=60)

    # Every call, on every thread, ended as the same request did on one thread: the same probabilities
    # (bit for bit) or, for the requests holding a string with a lone surrogate, the same refusal.
    assert result.errors == []
    assert result.refused_requests == [i for i, request in enumerate(requests) if not all(map(_encodable, request))]
    assert len(result.refused_requests) > 2 and len(result.refused_kinds) == 1  # the 2 surrogate texts, alone and in batches
    # Served throughout, by all threads: measured 595-754 calls/s on 2 cores, each thread within 5% of the
    # others; under 60 calls/s, or a thread held to a quarter of its share, would mean a stall.
    assert result.calls >= 60 * 60 and min(result.calls_per_thread) >= result.calls // 8 // 4
    # Measured: 10 MB of growth in 60 s (benchmarks/results/soak.md); the bound is 100 MB.
    assert result.rss_growth_mb < soak.RSS_BOUND_MB == 100
