#!/usr/bin/env bash
# sandbox export: verl 0.9.1, V1 trainer (separate_async). Every algorithm setting is in overrides.txt
# (see PROMOTION.md); fill in the variables marked FILL IN, adjust the layout defaults to your cluster.
set -euo pipefail
cd "$(dirname "$0")"

# FILL IN: your model and data
MODEL_PATH="${MODEL_PATH:?FILL IN: path or Hugging Face id of the policy model}"
TRAIN_FILES="${TRAIN_FILES:?FILL IN: training parquet file(s)}"
VAL_FILES="${VAL_FILES:?FILL IN: validation parquet file(s)}"
MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-1024}"
MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-2048}"

# FILL IN: GPU layout (trainer GPUs; separate_async adds a standalone rollout pool)
NNODES="${NNODES:-1}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
ROLLOUT_NNODES="${ROLLOUT_NNODES:-1}"
ROLLOUT_GPUS_PER_NODE="${ROLLOUT_GPUS_PER_NODE:-8}"
ROLLOUT_ENGINE="${ROLLOUT_ENGINE:-vllm}"
MICRO_BATCH_PER_GPU="${MICRO_BATCH_PER_GPU:-1}"

mapfile -t OVERRIDES < overrides.txt

python -m verl.trainer.main_ppo \
    "${OVERRIDES[@]}" \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="$TRAIN_FILES" \
    data.val_files="$VAL_FILES" \
    data.max_prompt_length="$MAX_PROMPT_LENGTH" \
    data.max_response_length="$MAX_RESPONSE_LENGTH" \
    actor_rollout_ref.rollout.name="$ROLLOUT_ENGINE" \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU" \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU" \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU" \
    trainer.nnodes="$NNODES" \
    trainer.n_gpus_per_node="$GPUS_PER_NODE" \
    actor_rollout_ref.rollout.nnodes="$ROLLOUT_NNODES" \
    actor_rollout_ref.rollout.n_gpus_per_node="$ROLLOUT_GPUS_PER_NODE" \
    "$@"
