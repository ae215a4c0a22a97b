"""Attention and hidden states equal transformers' on the real MiniLM checkpoint."""

import numpy as np
import pytest

from bert_keras.inspection import Inspector

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = [
    "The cat sat on the mat.",
    "@united thanks for nothing, my bag is in Denver and I'm in Boston!!! #fail",
    "BERT's attention: where does it go? To the separator, mostly.",
]
PAIRS = ["Where did it sit?", "Is the airline to blame?", "A short one."]


def _minilm_dir():
    import os

    from bert_keras.text.corpora import minilm_vocab_path

    try:
        return os.path.dirname(minilm_vocab_path())
    except FileNotFoundError as error:
        pytest.skip(str(error))


@pytest.mark.slow
def test_attention_and_hidden_states_match_transformers_on_minilm():
    directory = _minilm_dir()
    inspector = Inspector.from_checkpoint(directory, seq_length=128)
    reference = transformers.BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = transformers.BertTokenizerFast(inspector.vocab_file, do_lower_case=True)
    worst = {"attention": 0.0, "hidden": 0.0, "row_sum": 0.0}
    for pairs in (None, PAIRS):
        results = inspector.inspect(TEXTS, pairs)
        batch = tokenizer(TEXTS, pairs, padding=True, return_tensors="pt")
        with torch.no_grad():
            expected = reference(**batch, output_attentions=True, output_hidden_states=True)
        for b, result in enumerate(results):
            n = int(batch["attention_mask"][b].sum())
            assert result.tokens == tokenizer.convert_ids_to_tokens(batch["input_ids"][b, :n])
            assert result.type_ids == batch["token_type_ids"][b, :n].tolist()
            attention = np.stack([layer[b, :, :n, :n].numpy() for layer in expected.attentions])
            hidden = np.stack([layer[b, :n].numpy() for layer in expected.hidden_states])
            assert result.attention.shape == attention.shape == (6, 12, n, n)
            assert result.hidden_states.shape == hidden.shape == (7, n, 384)
            worst["attention"] = max(worst["attention"], float(np.abs(result.attention - attention).max()))
            worst["hidden"] = max(worst["hidden"], float(np.abs(result.hidden_states - hidden).max()))
            worst["row_sum"] = max(worst["row_sum"], float(np.abs(result.attention.sum(-1) - 1).max()))
    print(f"MiniLM inspect parity: attention {worst['attention']:.3g}, hidden states {worst['hidden']:.3g}, "
          f"row sums {worst['row_sum']:.3g}")
    assert worst["attention"] <= 1e-5
    assert worst["hidden"] <= 1e-4
    assert worst["row_sum"] <= 1e-5
