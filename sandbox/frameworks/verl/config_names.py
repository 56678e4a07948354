"""Names of verl's config that its exporter, importer and validator share: key prefixes and values."""

ACTOR = "actor_rollout_ref.actor"
CORR = "algorithm.rollout_correction"
V1 = "trainer.v1"

NO_DUAL_CLIP = 1e9
"""The ``clip_ratio_c`` written for "no dual clip": verl has no off switch, and a cap this high never binds."""

AGGREGATION = {
    a: a.replace("_", "-")
    for a in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")
}
"""The sandbox's aggregations as verl's ``loss_agg_mode`` spells them (the importer reads it backwards)."""
