#!/usr/bin/env bash
# OpenRLHF 0.11.2 run exported by `sandbox export`; PROMOTION.md explains every exported flag.
# Needs openrlhf==0.11.2 with vLLM on the GPU machines. On several nodes start Ray first
# (ray start --head / ray start --address=...) or submit this command with `ray job submit`.
# Extra flags are passed through, e.g. `bash launch.sh --data.apply_chat_template`.
set -euo pipefail

# ---- Your setup: fill these in (they are not exported from the scenario) ----
MODEL_PATH="${MODEL_PATH:?set MODEL_PATH to a Hugging Face model name or local path}"
PROMPT_DATASET="${PROMPT_DATASET:?set PROMPT_DATASET to a Hugging Face dataset name or path}"
INPUT_KEY="${INPUT_KEY:-input}"  # prompt field of the dataset
LABEL_KEY="${LABEL_KEY:-label}"  # field passed to the reward as labels (must exist in the dataset)
REWARD="${REWARD:?set REWARD to a reward server URL or a Python file defining reward_func(queries, prompts, labels)}"
NUM_NODES="${NUM_NODES:-1}"  # actor (DeepSpeed) nodes
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"  # actor GPUs per node; --train.batch_size must be a multiple of all actor GPUs
VLLM_ENGINES="${VLLM_ENGINES:-4}"  # vLLM engines generating (the sandbox's rollout workers)
VLLM_TP="${VLLM_TP:-1}"  # tensor parallel size of each engine
MAX_NEW_TOKENS="${MAX_NEW_TOKENS:-1024}"  # maximum response length
NUM_EPISODES="${NUM_EPISODES:-1}"  # passes over the prompts: optimizer steps = prompts x episodes / --rollout.batch_size
SAVE_PATH="${SAVE_PATH:-./ckpt/sandbox-export}"  # checkpoints
TENSORBOARD_DIR="${TENSORBOARD_DIR:-./runs/openrlhf}"  # metrics (names in PROMOTION.md)

SETUP_FLAGS=(
  --actor.model_name_or_path "$MODEL_PATH"
  --data.prompt_dataset "$PROMPT_DATASET"
  --data.input_key "$INPUT_KEY"
  --data.label_key "$LABEL_KEY"
  --reward.remote_url "$REWARD"
  --actor.num_nodes "$NUM_NODES"
  --actor.num_gpus_per_node "$GPUS_PER_NODE"
  --vllm.num_engines "$VLLM_ENGINES"
  --vllm.tensor_parallel_size "$VLLM_TP"
  --rollout.max_new_tokens "$MAX_NEW_TOKENS"
  --train.num_episodes "$NUM_EPISODES"
  --ckpt.output_dir "$SAVE_PATH"
  --logger.tensorboard_dir "$TENSORBOARD_DIR"
)

# ---- Exported from the scenario: the same lines as flags.txt ----
EXPORTED_FLAGS=(
  --train.async_enable
  --train.async_queue_size 4
  --train.partial_rollout_enable
  --rollout.n_samples_per_prompt 8
  --rollout.batch_size 4
  --train.batch_size 32
  --train.max_epochs 1
  --rollout.vllm_generate_batch_size 4
  --actor.policy_loss_type ppo
  --algo.advantage.estimator group_norm
  --algo.kl.init_coef 0.0
  --actor.loss_agg_mode seq-mean-token-mean
  --algo.advantage.is_correction_level off
  --actor.optim adam
  --actor.adam.weight_decay 0.0
  --actor.adam.betas 0.9 0.999
  --actor.adam.eps 1e-08
  --actor.lr_scheduler constant
  --actor.lr_warmup_ratio 0.0
)

exec python -m openrlhf.cli.train_ppo_ray "${SETUP_FLAGS[@]}" "${EXPORTED_FLAGS[@]}" "$@"
