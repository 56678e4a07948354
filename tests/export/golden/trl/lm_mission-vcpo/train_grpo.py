"""GRPOTrainer (TRL 1.16.0) with the GRPOConfig settings that `sandbox export` wrote to grpo_config.json.

Launch (see PROMOTION.md):
    # one training process, as the batch sizes were written (see PROMOTION.md to scale out)
    accelerate launch --num_processes 1 train_grpo.py

The three TODOs below are yours: the model, the prompt dataset and the reward function (the
scenario's toy task is not exported).
"""

import json
from pathlib import Path

from trl import GRPOConfig, GRPOTrainer

SETTINGS = Path(__file__).with_name("grpo_config.json")
OUTPUT_DIR = "outputs/grpo"

# TODO(model): a Hub id or a local path, e.g. "Qwen/Qwen2.5-0.5B-Instruct".
MODEL = None


def load_prompts():
    """TODO(dataset): return a datasets.Dataset with a "prompt" column (and any column your reward reads)."""
    raise NotImplementedError("load your prompt dataset here")


def reward(completions, **kwargs):
    """TODO(reward): one float per completion."""
    raise NotImplementedError("score the completions here")


def main():
    if MODEL is None:
        raise SystemExit("set MODEL in train_grpo.py first")
    settings = json.loads(SETTINGS.read_text())
    # Generation with vLLM (the vllm_importance_sampling_* settings act only then):
    # settings.update(use_vllm=True, vllm_mode="colocate")
    args = GRPOConfig(output_dir=OUTPUT_DIR, **settings)
    trainer = GRPOTrainer(model=MODEL, reward_funcs=reward, args=args, train_dataset=load_prompts())
    trainer.train()


if __name__ == "__main__":
    main()
