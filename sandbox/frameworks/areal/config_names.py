"""The file name of the AReaL config that the exporter writes and the validator reads."""

CONFIG_FILE = "areal_config.yaml"
