"""Figures and reports: sweep figures (heatmaps with theory boundaries, learning curves with seed
bands, throughput against staleness, ESS / gradient-cosine traces), the self-contained HTML report
(``sandbox report DIR``), and optional TensorBoard / Weights & Biases writers."""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
