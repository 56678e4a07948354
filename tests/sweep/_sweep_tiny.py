"""A tiny sweep base: a 6-dimensional delayed quadratic, a few dozen steps."""

TINY_BASE = {
    "title": "tiny delayed quadratic",
    "task": {"name": "quadratic", "dim": 6, "eig_min": 0.1, "eig_max": 1.0, "noise_std": 0.05, "replicas": 2},
    "system": {
        "num_workers": 3,
        "generation_time": {"kind": "constant", "value": 1.0},
        "train_time": {"kind": "constant", "value": 0.0},
        "staleness": {"kind": "fixed_lag", "k": 1},
    },
    "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": 0.1}},
    "run": {"steps": 20, "figures": False, "eval_every": 5},
}
