"""AsyncGRPOTrainer (TRL 1.16.0) with the AsyncGRPOConfig settings that `sandbox export` wrote to grpo_config.json.

Launch (see PROMOTION.md):
    # 1. generation server on its own GPU(s): AsyncGRPOTrainer needs vLLM's dev endpoints and NCCL weight
    #    transfer; serve in the trainer's dtype (AsyncGRPOConfig.dtype, float32 by default)
    CUDA_VISIBLE_DEVICES=0 VLLM_SERVER_DEV_MODE=1 vllm serve YOUR_MODEL --dtype float32 \
        --weight-transfer-config '{"backend":"nccl"}' &
    # 2. trainer (one process, as the batch sizes were written; see PROMOTION.md to scale out)
    CUDA_VISIBLE_DEVICES=1 accelerate launch --num_processes 1 train_grpo.py

The three TODOs below are yours: the model, the prompt dataset and the reward function (the
scenario's toy task is not exported).
"""

import json
from pathlib import Path

from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

SETTINGS = Path(__file__).with_name("grpo_config.json")
OUTPUT_DIR = "outputs/async-grpo"

# TODO(model): a Hub id or a local path, e.g. "Qwen/Qwen2.5-0.5B-Instruct".
MODEL = None


def load_prompts():
    """TODO(dataset): return a datasets.Dataset with a "prompt" column (and any column your reward reads)."""
    raise NotImplementedError("load your prompt dataset here")


def reward(completions, **kwargs):
    """TODO(reward): one float per completion.

    AsyncGRPOTrainer scores in a spawned process: keep this a module-level function."""
    raise NotImplementedError("score the completions here")


def main():
    if MODEL is None:
        raise SystemExit("set MODEL in train_grpo.py first")
    settings = json.loads(SETTINGS.read_text())
    # The vLLM server started by the launch command; set its address if it is not local:
    # settings["vllm_server_base_url"] = "http://HOST:8000"
    args = AsyncGRPOConfig(output_dir=OUTPUT_DIR, **settings)
    trainer = AsyncGRPOTrainer(model=MODEL, reward_funcs=reward, args=args, train_dataset=load_prompts())
    trainer.train()


if __name__ == "__main__":
    main()
