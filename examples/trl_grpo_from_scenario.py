"""A scenario's method inside TRL's GRPOTrainer, end to end, with nothing to download.

``SandboxGRPOConfig.from_scenario("lm_mission", variant="gac", ...)`` takes the objective, correction and
stabilizers of the ``gac`` variant of the shipped ``lm_mission`` scenario (GAC, arXiv 2603.01501, on
REINFORCE with a group-mean baseline) into a ``trl.GRPOConfig`` (TRL 1.16); ``SandboxGRPOTrainer`` trains
with them. The model is a tiny Llama built from a config, the tokenizer a character vocabulary built here,
the reward a verifiable one (the fraction of digits in a completion), the dataset 16 addition prompts.
Two optimizer steps on a CPU take a few seconds:

    python examples/trl_grpo_from_scenario.py --steps 2 --out /tmp/trl-example

Swap in your model (``AutoModelForCausalLM.from_pretrained``), tokenizer, reward functions and dataset
for a real run; the ``args`` line stays (docs/promotion.md#trl).
"""

from __future__ import annotations

import argparse
import tempfile

from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from sandbox.integrations.trl import SandboxGRPOConfig, SandboxGRPOTrainer

CHARS = list("0123456789+=ab")
VOCAB = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>"] + CHARS)}


def tokenizer() -> PreTrainedTokenizerFast:
    """One token per character of :data:`CHARS`."""
    tk = Tokenizer(models.WordLevel(VOCAB, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")


def tiny_model() -> LlamaForCausalLM:
    """A 2-layer Llama of hidden size 32, randomly initialised from a config (no weights downloaded)."""
    cfg = LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    return LlamaForCausalLM(cfg)


def digit_fraction(completions, **kwargs) -> list[float]:
    """Verifiable reward: the fraction of digits in each completion."""
    return [sum(c.isdigit() for c in comp) / max(len(comp), 1) for comp in completions]


def main(argv=None) -> SandboxGRPOTrainer:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2, help="optimizer steps (default 2)")
    ap.add_argument("--out", default=None, help="TRL's output_dir (default: a temporary directory)")
    ap.add_argument("--variant", default="gac", help="variant of lm_mission whose method is trained (default gac)")
    a = ap.parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="trl-example-")
    args = SandboxGRPOConfig.from_scenario(
        "lm_mission",
        variant=a.variant,
        output_dir=out,
        max_steps=a.steps,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        learning_rate=3e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        seed=0,
        save_strategy="no",
        beta=0.0,
    )
    trainer = SandboxGRPOTrainer(
        model=tiny_model(),
        reward_funcs=digit_fraction,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"{i}+{j}=" for i in range(4) for j in range(4)]}),
        processing_class=tokenizer(),
    )
    trainer.train()
    stabilizers = [s.name for s in trainer.sandbox.stabilizers]
    print(
        f"trained {trainer.state.global_step} steps of lm_mission/{a.variant}: objective "
        f"{trainer.sandbox.objective.name if trainer.sandbox.objective else 'TRL'}, stabilizers {stabilizers}; "
        f"logged: {sorted({k for h in trainer.state.log_history for k in h if k.startswith(('gac/', 'is/', 'grad/'))})}"
    )
    return trainer


if __name__ == "__main__":
    main()
