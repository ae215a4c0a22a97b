"""What a kind's answering code asks of an engine: run a named signature on a batch, arrays in and arrays out.

Serving is kind x engine. An engine loads a model and runs its signatures:
`loaded.LoadedExport` a SavedModel directory (load, the endpoints no request
calls left out, warm-up), `litert_engine.LiteRTModel` a `.tflite` file
(LiteRT's interpreter, tensorflow-text's kernels, XNNPACK, one lock, the
record checked). A kind (`kinds.classifier`, `kinds.tagger`, `kinds.reader`,
`kinds.sentence_encoder`) turns those arrays into answers (blank texts,
top-k, entities with offsets, answers, batching) and never asks which engine
ran them: a loaded export of one kind on one engine is a class of both,
`class ExportedTagger(TaggerAnswers, LoadedExport)`.

This module imports neither TensorFlow nor LiteRT.
"""


class Engine:
    """The interface every engine implements; the kinds call only these.

    Attributes:
        kind: str. What the loaded model serves (`manifest.KINDS`).
    """

    kind = None

    def run(self, signature, **inputs):
        """Runs the model's signature `signature` on one batch.

        Args:
            signature: str. The signature's name (`serving_default`, `serve`,
                `windows`, `window_range`, ...).
            **inputs: the signature's inputs by name: lists of str for string
                inputs, ints or numpy arrays for the others.

        Returns:
            A dict of the signature's outputs by name, numpy arrays.
        """
        raise NotImplementedError

    def check_serves_text(self):
        """Raises an `ExportError` where the model cannot take raw strings (a file of token ids only)."""

    def answered(self):
        """Called by the kinds after each request (a SavedModel then starts its pending background warm-up)."""
