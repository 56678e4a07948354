"""Names of verl's config that its exporter, importer and validator share: key prefixes and values."""

ACTOR = "actor_rollout_ref.actor"
CORR = "algorithm.rollout_correction"
V1 = "trainer.v1"

NO_DUAL_CLIP = 1e9
"""The ``clip_ratio_c`` written for "no dual clip": verl has no off switch, and a cap this high never binds."""
