"""Embedding a corpus too big for one machine: Apache Beam's RunInference with an exported sentence encoder.

Needs the `beam` extra (`pip install -e ".[beam]"`, Apache Beam beside
TensorFlow 2.21). `SentenceEncoderHandler` is a Beam `ModelHandler`: each
worker loads the SavedModel that `export_sentence_encoder` (or `bert-keras
embed`'s `--model`) wrote, Beam batches the texts, and the vectors are the
export's, equal to `bert-keras index`'s. `embed_texts` is the whole
pipeline: text files in (one text per line; a glob for many files), JSON
lines `{"text": ..., "embedding": [...]}` out (the format of `bert-keras
embed --out FILE.jsonl`), in shards. The runner and its options come from the
usual Beam arguments:

    python -m bert_keras.beam --model EXPORT --input 'corpus/*.txt' --output vectors/part \\
        --runner DirectRunner --direct_num_workers 2 --direct_running_mode multi_processing

The same pipeline runs on a cluster by naming another runner
(`--runner FlinkRunner`, `SparkRunner`, `DataflowRunner`) with that runner's
options; the export directory and the files must then be where the workers
can read them, and the workers need this package with its `beam` extra
(docs/sentence_embeddings.md).
"""

import argparse
import json
import logging
import os
import sys

import numpy as np

from bert_keras._checks import check_positive_int


def _beam():
    """Imports Apache Beam (a clear error without the extra); its import-time notice about optional cloud clients is dropped."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # "apitools not found ...": a WARNING on the root logger about clients we do not use
    try:
        import apache_beam
        from apache_beam.ml.inference import base
    except ImportError as error:
        raise ImportError(
            f"bert_keras.beam needs Apache Beam ({error}). Install the extra: pip install -e \".[beam]\""
        ) from None
    finally:
        root.setLevel(level)
    return apache_beam, base


beam, _inference = _beam()


class SentenceEncoderHandler(_inference.ModelHandler):
    """A Beam `ModelHandler` of texts -> `PredictionResult(text, vector)` over an exported sentence encoder.

    Each worker process loads the export once; each batch of str Beam forms
    is one `encode` of the export (its `serving_default`).

    Args:
        export_dir: str. A directory written by `export_sentence_encoder`,
            readable by every worker.
        batch_size: int. The most texts Beam gives the model at once. Defaults to `64`.
    """

    def __init__(self, export_dir, batch_size=64):
        super().__init__()
        self.export_dir = os.fspath(export_dir)
        self.batch_size = check_positive_int("batch_size", batch_size)

    def load_model(self):
        from bert_keras.export import load_sentence_encoder

        return load_sentence_encoder(self.export_dir)

    def run_inference(self, batch, model, inference_args=None):
        texts = [text.decode("utf-8") if isinstance(text, bytes) else text for text in batch]
        bad = next((text for text in texts if not isinstance(text, str)), None)
        if bad is not None:
            raise TypeError(f"SentenceEncoderHandler takes str elements. Received: {type(bad).__name__}")
        vectors = model.encode(texts, batch_size=self.batch_size) if texts else np.zeros((0, model.embedding_dim), "float32")
        return [_inference.PredictionResult(text, vector) for text, vector in zip(texts, vectors)]

    def batch_elements_kwargs(self):
        return {"min_batch_size": 1, "max_batch_size": self.batch_size}

    def get_metrics_namespace(self):
        return "bert_keras_sentence_encoder"


def _json_line(result):
    return json.dumps({"text": result.example, "embedding": [float(x) for x in result.inference]}, ensure_ascii=False)


def embed_texts(export_dir, input_pattern, output_prefix, pipeline_args=(), batch_size=64):
    """Runs the pipeline: text files -> RunInference(export) -> JSON-lines shards `OUTPUT_PREFIX-SSSSS-of-NNNNN.jsonl`.

    Args:
        export_dir: str. The exported sentence encoder (readable by every worker).
        input_pattern: str. A text file or a glob; one text per line (UTF-8; a blank line is a text too).
        output_prefix: str. Where the shards go.
        pipeline_args: Beam's options (`--runner`, `--direct_num_workers`, ...). Defaults to the local runner.
        batch_size: int. The most texts per model call. Defaults to `64`.

    Returns:
        The pipeline's final state (e.g. `"DONE"`).
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    model = SentenceEncoderHandler(export_dir, batch_size)  # checks the arguments before the pipeline starts
    with beam.Pipeline(options=PipelineOptions(list(pipeline_args))) as pipeline:
        (
            pipeline
            | "Read texts" >> beam.io.ReadFromText(input_pattern, strip_trailing_newlines=True)
            | "Embed" >> _inference.RunInference(model)
            | "To JSON lines" >> beam.Map(_json_line)
            | "Write" >> beam.io.WriteToText(output_prefix, file_name_suffix=".jsonl")
        )
    return pipeline.result.state


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bert_keras.beam",
        description="Embed text files with an exported sentence encoder on Apache Beam (RunInference). Arguments "
        "this command does not know are Beam's pipeline options (--runner, --direct_num_workers, ...).",
    )
    parser.add_argument("--model", required=True, help="directory written by export_sentence_encoder")
    parser.add_argument("--input", required=True, help="a text file or a glob, one text per line")
    parser.add_argument("--output", required=True, help="prefix of the JSON-lines shards")
    parser.add_argument("--batch-size", type=int, default=64)
    args, pipeline_args = parser.parse_known_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bert_keras.export import load_sentence_encoder

    try:
        load_sentence_encoder(args.model)  # a clear error now, not in every worker
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    state = embed_texts(args.model, args.input, args.output, pipeline_args, args.batch_size)
    print(f"Pipeline {state}: embeddings in {args.output}-*.jsonl", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
