#!/usr/bin/env bash
# Start the AReaL 1.0.4 run exported by `sandbox export` (see PROMOTION.md).
# Replace each <placeholder> below (or export the variable). Everything algorithmic is in
# areal_config.yaml; extra Hydra overrides go after the script's arguments, and keys that
# areal_config.yaml does not contain need Hydra's +key=value form.
set -euo pipefail

ENTRY_SCRIPT="${ENTRY_SCRIPT:-<your AReaL GRPO training script, e.g. examples/math/gsm8k_rl.py>}"
MODEL_PATH="${MODEL_PATH:-<model path or Hugging Face id>}"
DATASET_PATH="${DATASET_PATH:-<dataset path or Hugging Face id>}"
EXPERIMENT_NAME="${EXPERIMENT_NAME:-<experiment name, no '_' or '/'>}"
TRIAL_NAME="${TRIAL_NAME:-<trial name, no '-' or '/'>}"
ACTOR_BACKEND="${ACTOR_BACKEND:-<training backend and parallelism, e.g. fsdp:d4>}"
ROLLOUT_BACKEND="${ROLLOUT_BACKEND:-<inference backend and parallelism, e.g. sglang:d4>}"

for var in ENTRY_SCRIPT MODEL_PATH DATASET_PATH EXPERIMENT_NAME TRIAL_NAME ACTOR_BACKEND ROLLOUT_BACKEND; do
  if [[ "${!var}" == "<"* ]]; then echo "launch.sh: set $var" >&2; exit 2; fi
done
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

python3 "$ENTRY_SCRIPT" --config "$HERE/areal_config.yaml" \
  experiment_name="$EXPERIMENT_NAME" trial_name="$TRIAL_NAME" \
  actor.path="$MODEL_PATH" train_dataset.path="$DATASET_PATH" \
  actor.backend="$ACTOR_BACKEND" rollout.backend="$ROLLOUT_BACKEND" \
  "$@"
