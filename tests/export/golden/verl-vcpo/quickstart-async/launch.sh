#!/usr/bin/env bash
# sandbox export: mit-han-lab/vcpo c7f030f0, fully-async Megatron recipe. Every algorithm setting is in
# overrides.txt (see PROMOTION.md); fill in the variables marked FILL IN, adjust the layout to your cluster.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

# FILL IN: the fork, your model and data
VCPO_DIR="${VCPO_DIR:?FILL IN: checkout of github.com/mit-han-lab/vcpo at c7f030f0}"
MODEL_PATH="${MODEL_PATH:?FILL IN: path or Hugging Face id of the policy model}"
TRAIN_FILES="${TRAIN_FILES:?FILL IN: training parquet file(s)}"
VAL_FILES="${VAL_FILES:?FILL IN: validation parquet file(s)}"
TOTAL_ROLLOUT_STEPS="${TOTAL_ROLLOUT_STEPS:?FILL IN: prompts to generate in total = trainer steps x 8}"
MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-1024}"
MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-2048}"

# FILL IN: GPU layout (trainer and rollout GPUs are separate in the fully-async recipe)
NNODES="${NNODES:-1}"
TRAIN_GPUS_PER_NODE="${TRAIN_GPUS_PER_NODE:-4}"
ROLLOUT_GPUS_PER_NODE="${ROLLOUT_GPUS_PER_NODE:-4}"
TRAIN_TP="${TRAIN_TP:-4}"
ROLLOUT_ENGINE="${ROLLOUT_ENGINE:-vllm}"
MICRO_BATCH_PER_GPU="${MICRO_BATCH_PER_GPU:-1}"

mapfile -t OVERRIDES < "$HERE/overrides.txt"
cd "$VCPO_DIR"

python -m recipe.fully_async_policy.fully_async_main \
    --config-name=fully_async_ppo_megatron_trainer.yaml \
    "${OVERRIDES[@]}" \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="$TRAIN_FILES" \
    data.val_files="$VAL_FILES" \
    data.max_prompt_length="$MAX_PROMPT_LENGTH" \
    data.max_response_length="$MAX_RESPONSE_LENGTH" \
    actor_rollout_ref.rollout.name="$ROLLOUT_ENGINE" \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$TRAIN_TP" \
    actor_rollout_ref.ref.megatron.tensor_model_parallel_size="$TRAIN_TP" \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU" \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1 \
    trainer.nnodes="$NNODES" \
    trainer.n_gpus_per_node="$TRAIN_GPUS_PER_NODE" \
    rollout.nnodes="$NNODES" \
    rollout.n_gpus_per_node="$ROLLOUT_GPUS_PER_NODE" \
    rollout.total_rollout_steps="$TOTAL_ROLLOUT_STEPS" \
    "$@"
