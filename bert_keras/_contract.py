"""The names of the TF Hub BERT contract that every layer of the package shares.

Packers produce this dict, encoders and Hub modules take it (DESIGN.md, "The
Hub module contract"); it sits below all of them, so none imports another
for a name.
"""

# The encoder's inputs: int32 `(batch, seq)` tensors.
INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
