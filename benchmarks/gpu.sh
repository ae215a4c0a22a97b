#!/usr/bin/env bash
# The benchmark table on a GPU machine: fp32 (with XLA variants) and bf16, MiniLM-L6 and BERT-Base
# inference and the MiniLM training step, ours vs keras-nlp vs torch. About 10 minutes.
#   bash benchmarks/gpu.sh            (from the repository root)
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL=2
PY=${PYTHON:-python}
$PY -c "import tensorflow as tf, torch; assert tf.config.list_physical_devices('GPU') and torch.cuda.is_available(), 'no GPU visible'"
nvidia-smi --query-gpu=name,memory.total --format=csv
$PY benchmarks/run_all.py --gpu --rounds 2 --other-rounds 2 --repeats 10 \
    --sections gemm minilm base train \
    --minilm-peers ours "ours (padded)" "ours + XLA" keras-nlp "keras-nlp + XLA" torch \
    --base-peers ours "ours + XLA" keras-nlp torch --train-peers ours "ours + XLA" keras-nlp torch \
    --output benchmarks/results/benchmarks_gpu_fp32.md
$PY benchmarks/run_all.py --gpu --dtype mixed_bfloat16 --rounds 2 --other-rounds 2 --repeats 10 \
    --sections minilm base train \
    --minilm-peers ours "ours + XLA" keras-nlp torch --base-peers ours keras-nlp torch \
    --train-peers ours keras-nlp torch \
    --output benchmarks/results/benchmarks_gpu_bf16.md
