"""Writes a tiny TF Hub BERT encoder module with TF Model Garden's own exporter.

Run where tf-models-official imports (it needs tf-keras and gin-config; it is
not a dependency of bert_keras):

    PYTHONPATH=<site with official/> python tests/inspection/make_model_garden_module.py OUT_DIR

`OUT_DIR/encoder` is written by `official.nlp.tools.export_tfhub_lib.export_model`
(the exporter of the published `bert_en_uncased_L-*_H-*_A-*` modules), with
random weights, and `OUT_DIR/preprocess` by its `export_preprocessing`.
`tests/inspection/data/model_garden_tiny` holds the committed output, so that
the import test runs where tf-models-official does not install.
"""

import os
import sys
import tempfile

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    "the", "cat", "sat", "on", "mat", "a", "dog", "ran", ".", ",", "!", "?", "hello", "world", "bert",
    "##s", "##ing", "is", "and", "to", "of", "it", "was", "not", "good", "bad", "i", "you", "what", "look",
]


def write_module(out_dir, seed=0):
    import numpy as np
    import tensorflow as tf
    from official.legacy.bert import configs
    from official.nlp.tools import export_tfhub_lib

    os.makedirs(out_dir, exist_ok=True)
    vocab_file = os.path.join(out_dir, "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    bert_config = configs.BertConfig(
        vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=32, hidden_act="gelu", max_position_embeddings=64, type_vocab_size=2,
    )
    tf.random.set_seed(seed)
    encoder = export_tfhub_lib.get_bert_encoder(bert_config)
    rng = np.random.default_rng(seed)
    for variable in encoder.variables:  # non-trivial LayerNorm and bias values, too
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype(variable.dtype.as_numpy_dtype))
    with tempfile.TemporaryDirectory() as tmp:
        prefix = tf.train.Checkpoint(encoder=encoder).save(os.path.join(tmp, "ckpt"))
        export_tfhub_lib.export_model(
            os.path.join(out_dir, "encoder"), bert_config=bert_config, model_checkpoint_path=prefix,
            with_mlm=False, vocab_file=vocab_file, do_lower_case=True,
        )
    export_tfhub_lib.export_preprocessing(
        os.path.join(out_dir, "preprocess"), vocab_file=vocab_file, do_lower_case=True, default_seq_length=16,
        tokenize_with_offsets=False,
    )
    os.remove(vocab_file)
    return out_dir


if __name__ == "__main__":
    write_module(sys.argv[1])
