"""Names of the VCPO fork's config that its exporter, importer and validator share: key prefixes, the
Hydra config name and the pinned key list."""

from pathlib import Path

from sandbox.frameworks.verl.config_names import ACTOR

GB = f"{ACTOR}.grad_baselining"
ESS = f"{ACTOR}.ess_scaling"
OPTIM = f"{ACTOR}.optim"
MEGATRON_EXTRA = f"{OPTIM}.override_optimizer_config"
"""An open map of extra Megatron ``OptimizerConfig`` fields (empty in the fork's YAML, so its keys are ``+`` appends)."""
CONFIG_NAME = "fully_async_ppo_megatron_trainer"
KEYS_FILE = Path(__file__).resolve().parent / "keys" / "verl_vcpo_c7f030f0.json"
