"""Small language-model policies on synthetic tasks with verifiable rewards.

* :mod:`.problems` — character tokenizer; addition, countdown, sort/reverse; deterministic prompt sets.
* :mod:`.warmstart` — the supervised "base model" (partial accuracy), cached on disk.
* :mod:`.task` — :class:`LMTask`, the :class:`~sandbox.tasks.base.PolicyTask` over the transformer.

The multi-seed mission driver (one figure with reward, ESS, gradient cosine, gradient norm and LR, a
table with mean ± std over seeds, and VCPO's constant-LR control) is an experiment, not part of the
task: :mod:`sandbox.sweep.mission`. Task page: ``docs/tasks.md#lm``.

TOML::

    [task]
    name = "lm"
    problem = { kind = "addition", digits = 3 }      # or countdown / sort / reverse
    model = { d_model = 64, n_layers = 2, n_heads = 4 }  # builtin; or backend = "hf" (below)
    warmstart = { target_accuracy = 0.35 }           # the cached base model
    device = "cpu"                                   # or "cuda"; dtype = "float32" | "bfloat16" ...

A Hugging Face ``transformers`` causal LM instead of the builtin transformer (optional dependency,
:mod:`sandbox.models.hf`; ``scenarios/lm_mission_hf.toml``)::

    model = { backend = "hf", config = { model_type = "llama", hidden_size = 64, num_hidden_layers = 2,
              num_attention_heads = 4, intermediate_size = 128 } }
    model = { backend = "hf", path = "/local/checkpoint" }   # its tokenizer is not used

Commands::

    sandbox run scenarios/lm_mission.toml                                   # one seed, every variant
    sandbox mission lm_mission --seeds 3                                    # seeds + mission.png
    python benchmarks/bench_lm.py [--backend hf]                            # KV cache, learner step split

The base model is cached in ``$SANDBOX_CACHE_DIR`` (default ``$XDG_CACHE_HOME/async-rl-sandbox``, i.e.
``~/.cache/async-rl-sandbox`` on Linux: the platform's user cache directory).
OPOB (VCPO's baseline) uses :meth:`LMTask.sequence_logprob` with per-trajectory inputs
``(tokens, mask, prompt)`` from :meth:`LMTask.sequence_inputs` (``torch.func`` per-sample gradients).
"""

from sandbox.tasks.lm.problems import (
    AdditionConfig,
    CharTokenizer,
    CountdownConfig,
    SequenceConfig,
    eval_expression,
    make_prompt_sets,
)
from sandbox.tasks.lm.task import LMTask, LMTaskConfig
from sandbox.tasks.lm.warmstart import WarmStartConfig, cache_dir, load_or_train

__all__ = [
    "AdditionConfig",
    "CharTokenizer",
    "CountdownConfig",
    "SequenceConfig",
    "eval_expression",
    "make_prompt_sets",
    "LMTask",
    "LMTaskConfig",
    "WarmStartConfig",
    "cache_dir",
    "load_or_train",
]
