#!/usr/bin/env bash
# Start the exported prime-rl run (PrimeIntellect-ai/prime-rl git 559b4477).
#
# rl.toml holds only the keys exported from the scenario (PROMOTION.md explains each one). What the
# scenario cannot know goes into a second file written below and merged after rl.toml
# (`uv run rl @ a.toml @ b.toml` deep-merges left to right).
#
# FILL IN before running (edit the defaults here or export the variables):
#   MODEL         Hugging Face name or local path of the policy
#   ENV_ID        verifiers taskset id of the training environment. Tasksets built into verifiers (the
#                 deps/verifiers submodule at a60a606e, verifiers.v1.tasksets: harbor, lean, nemo_gym,
#                 openenv, textarena) need no install but their own settings. Any other id is a package
#                 that must be installed in your checkout first: prime-rl's own example reverse-text
#                 (configs/basic/reverse-text/rl.toml) is an opt-in uv workspace member, installed with
#                   git submodule update --init -- deps/verifiers deps/renderers deps/prime-envs deps/pydantic-config
#                   uv sync --all-extras --package prime-rl --package reverse-text
#                 and run with [orchestrator.train.source.env.agent.harness] id = "null" (see below)
#   MAX_STEPS     trainer steps of the run
#   PRIME_RL_DIR  your prime-rl checkout at 559b4477 (default: the current directory)
set -euo pipefail

MODEL="${MODEL:-<FILL IN: model, e.g. Qwen/Qwen3-0.6B>}"
ENV_ID="${ENV_ID:-<FILL IN: taskset id, e.g. reverse-text once installed (see above)>}"
MAX_STEPS="${MAX_STEPS:-<FILL IN: number of steps>}"
PRIME_RL_DIR="${PRIME_RL_DIR:-.}"

for value in "$MODEL" "$ENV_ID" "$MAX_STEPS"; do
  case "$value" in
    "<FILL IN"*) echo "launch.sh: set MODEL, ENV_ID and MAX_STEPS first (see the top of this file)" >&2; exit 2 ;;
  esac
done

EXPORT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SETUP="$(mktemp -d)/setup.toml"
cat > "$SETUP" <<EOF
# Your setup, not exported from the scenario.
max_steps = $MAX_STEPS

[model]
name = "$MODEL"

# One GPU for the trainer and one for vLLM: change for your node.
[deployment]
num_train_gpus = 1
num_infer_gpus = 1

# Starts a vLLM server for the policy; remove it if you run one at orchestrator.model.client.base_url.
[inference]

[[orchestrator.train.source]]
[orchestrator.train.source.env.taskset]
id = "$ENV_ID"
# Add what your environment needs (env.agent.harness, env.agent.runtime, ...: see configs/basic/*/rl.toml
# in prime-rl), the response length ([orchestrator.train.sampling] max_completion_tokens), and
# [orchestrator.renderer] name = "..." when the model is not in renderers' MODEL_RENDERER_MAP.
EOF

cd "$PRIME_RL_DIR"
exec uv run rl @ "$EXPORT_DIR/rl.toml" @ "$SETUP"
