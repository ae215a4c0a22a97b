"""The names of the TF Hub BERT contract that every layer of the package shares.

Packers produce this dict, encoders and Hub modules take it (DESIGN.md, "The
Hub module contract"); it sits below all of them, so none imports another
for a name.
"""

# The encoder's inputs: int32 `(batch, seq)` tensors.
INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")

# Beside an encoder module that bert_keras writes, where TensorFlow never reads: the encoder's `num_heads`,
# `activation` and `layer_norm_epsilon`, which its variables' shapes do not show (JSON). The module reader tries
# this config first (and checks it on a probe batch like any other): without it, a module of small weights
# (BERT's initializer range) gives its outputs for several head counts and either GELU within the probe's tolerance.
ARCHITECTURE_FILE = "assets.extra/bert_keras_encoder.json"
