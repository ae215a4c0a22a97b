"""Any checkpoint the converters read -> a pair of TF Hub modules (encoder, preprocess)."""

import logging
import os
import shutil
import tempfile

from bert_keras.hub import export_encoder, export_preprocessor

logger = logging.getLogger(__name__)

STEPS = ("read the checkpoint", "write the encoder module", "write the preprocess module", "move into place")


def convert_to_hub(source, out_dir, seq_length=128, overwrite=False, progress=None):
    """Converts a checkpoint into `out_dir/encoder` and `out_dir/preprocess`.

    Both are written into a temporary directory next to `out_dir` and moved
    into place at the end, so a failed run leaves nothing half-written.

    Args:
        source: a checkpoint path `load_checkpoint` reads (Hugging Face,
            original Google BERT, keras-nlp preset).
        out_dir: str. The output directory.
        seq_length: int. The preprocess module's default sequence length.
            Defaults to `128`.
        overwrite: bool. Replace existing modules in `out_dir`. Defaults to `False`.
        progress: optional callable `progress(step_index, num_steps, text)`.

    Returns:
        The `LoadedCheckpoint` that was exported.
    """
    from bert_keras.checkpoints import load_checkpoint

    out_dir = os.fspath(out_dir)
    targets = [os.path.join(out_dir, name) for name in ("encoder", "preprocess")]
    existing = [path for path in targets if os.path.exists(path)]
    if existing and not overwrite:
        raise FileExistsError(
            f"{', '.join(existing)} already exist(s); pass overwrite=True (--force) to replace."
        )
    report = progress or (lambda index, total, text: logger.info("[%d/%d] %s", index, total, text))

    report(1, len(STEPS), f"{STEPS[0]}: {source}")
    loaded = load_checkpoint(source)
    if loaded.vocab_file is None:
        raise ValueError(f"The checkpoint at {source!r} has no vocabulary file; a Hub module needs vocab.txt.")
    os.makedirs(out_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".partial-", dir=out_dir)
    try:
        report(2, len(STEPS), STEPS[1] + (" (with the mlm sub-object)" if loaded.pretrainer is not None else ""))
        export_encoder(
            loaded.encoder,
            os.path.join(staging, "encoder"),
            loaded.vocab_file,
            loaded.do_lower_case,
            pretrainer=loaded.pretrainer,
        )
        report(3, len(STEPS), f"{STEPS[2]} (seq_length={seq_length}, do_lower_case={loaded.do_lower_case})")
        export_preprocessor(os.path.join(staging, "preprocess"), loaded.vocab_file, loaded.do_lower_case, seq_length)
        report(4, len(STEPS), f"{STEPS[3]}: {out_dir}")
        for target in targets:
            if os.path.exists(target):
                shutil.rmtree(target)
            os.replace(os.path.join(staging, os.path.basename(target)), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return loaded
