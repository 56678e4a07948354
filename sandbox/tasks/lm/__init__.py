"""Small language-model policies on synthetic tasks with verifiable rewards.

* :mod:`.problems` — character tokenizer; addition, countdown, sort/reverse; deterministic prompt sets.
* :mod:`.warmstart` — the supervised "base model" (partial accuracy), cached on disk.
* :mod:`.task` — :class:`LMTask`, the :class:`~sandbox.tasks.base.PolicyTask` over the transformer.
"""

from .problems import AdditionConfig, CharTokenizer, CountdownConfig, SequenceConfig, eval_expression, make_prompt_sets
from .task import LMTask, LMTaskConfig
from .warmstart import WarmStartConfig, cache_dir, load_or_train

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
