"""The file names of the TRL export that the exporter writes and the validator reads."""

CONFIG_FILE = "grpo_config.json"
SCRIPT_FILE = "train_grpo.py"
