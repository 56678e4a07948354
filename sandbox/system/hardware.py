"""A small data table of accelerators and model sizes, and the timing formulas that read it
(``docs/system.md#hardware``).

GPU figures are the vendors' datasheet values (dense bf16 tensor-core FLOP/s without sparsity,
HBM bandwidth, NVLink bandwidth per GPU), cited with their source in ``docs/system.md#hardware``.
Model sizes are the parameter counts and attention shapes of the public model cards.

Formulas (``docs/system.md#hardware``):

* training FLOPs of a step: ``(6 + 2·r) · N · T`` for ``N`` parameters, ``T`` tokens and ``r``
  extra forward passes (log-prob recomputes: old policy, reference), the 6·N·T rule of Kaplan et
  al. 2020 (arXiv 2001.08361, section 2.1) plus 2·N·T per forward pass;
* step time ``FLOPs / (gpus · peak · MFU)``;
* decode step of an engine over ``g`` GPUs (tensor parallel) with ``n`` sequences in flight of mean
  context ``C`` tokens: ``a + b·n`` (the roofline reading of decoding, Pope et al. 2022,
  arXiv 2211.05102, section 2; the memory and compute terms added, not overlapped: an upper bound
  within ~10% of the overlapped ``max`` at the batches RL runs, docs/system.md#hardware) with

      a = W / (g · HBM · η_mem)
      b = K·C / (g · HBM · η_mem) + (2·N_act + 4·layers·d_attn·C) / (g · peak · η_flop)

  ``W`` the bf16 bytes of all parameters (a mixture-of-experts model reads every expert once a batch of
  RL size touches them all), ``K`` KV bytes per cached token, ``N_act`` the parameters active per token
  (all of a dense model's), ``d_attn = heads · head_dim``; attention reads (``K·C``) and attention FLOPs
  (``4·layers·d_attn·C``, QKᵀ and AV) grow with the context;
* prefill ``2·N_act / (g · peak · η_flop)`` seconds per prompt token;
* the mean context of a sequence in flight, :func:`mean_context`: ``P + E[L'²] / (2·E[L'])`` for prompt
  ``P`` and capped log-normal response lengths ``L'`` (a sequence in flight at a random step is seen
  with probability proportional to its length, at a uniform point of it);
* weight sync ``weight bytes / interconnect bandwidth``.

η_mem and η_flop are :data:`MEMORY_EFFICIENCY` (measured, sourced) and :data:`FLOP_EFFICIENCY` (an
assumption, named as one wherever it is used).

>>> round(decode_step_costs("H100", "qwen2.5-7b", gpus=1, context_tokens=1000)[0] * 1e3, 3)
6.058
>>> round(train_step_seconds("H100", "qwen2.5-7b", tokens=1_000_000, gpus=8, mfu=0.4, recompute_passes=1), 2)
19.24
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    """``peak_bf16``: dense bf16 FLOP/s; ``hbm``: memory bandwidth, bytes/s; ``link``: NVLink bandwidth
    per GPU (all links, one direction), bytes/s; ``memory``: HBM capacity, bytes."""

    peak_bf16: float
    hbm: float
    link: float
    memory: float


@dataclass(frozen=True)
class Model:
    """``params``: parameter count (all experts of a mixture-of-experts model); ``layers``, ``kv_heads``,
    ``head_dim``: the attention shape that sizes the KV cache (grouped-query attention: ``kv_heads`` keys
    and values per layer); ``heads``: query heads (attention FLOPs); ``active``: parameters used per
    token (None = ``params``, a dense model)."""

    params: float
    layers: int
    kv_heads: int
    head_dim: int
    heads: int
    active: float | None = None

    @property
    def active_params(self) -> float:
        return self.params if self.active is None else self.active

    @property
    def attention_width(self) -> int:
        return self.heads * self.head_dim

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> float:
        """``2 (K and V) · layers · kv_heads · head_dim · bytes`` per cached token."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * bytes_per_value

    def weight_bytes(self, bytes_per_param: int = 2) -> float:
        return self.params * bytes_per_param


GPUS: dict[str, GPU] = {
    # NVIDIA A100 80GB SXM datasheet: 312 TFLOPS bf16 dense, 2,039 GB/s, NVLink 600 GB/s (bidirectional)
    "A100": GPU(peak_bf16=312e12, hbm=2.039e12, link=300e9, memory=80e9),
    # NVIDIA H100 SXM datasheet: 1,979 TFLOPS bf16 with sparsity = 989 dense, 3.35 TB/s, NVLink 900 GB/s
    "H100": GPU(peak_bf16=989e12, hbm=3.35e12, link=450e9, memory=80e9),
    # NVIDIA H800 SXM5 datasheet: same Hopper die and HBM3 as the H100 SXM, NVLink 400 GB/s (bidirectional)
    "H800": GPU(peak_bf16=989e12, hbm=3.35e12, link=200e9, memory=80e9),
    # NVIDIA H200 SXM datasheet: 989 TFLOPS bf16 dense (same die as H100), 4.8 TB/s, NVLink 900 GB/s
    "H200": GPU(peak_bf16=989e12, hbm=4.8e12, link=450e9, memory=141e9),
    # NVIDIA H20 (HGX H20 product brief): 148 TFLOPS bf16 dense, 4.0 TB/s, NVLink 900 GB/s, 96 GB
    "H20": GPU(peak_bf16=148e12, hbm=4.0e12, link=450e9, memory=96e9),
}
"""Accelerators by name (``docs/system.md#hardware`` cites each figure)."""

MODELS: dict[str, Model] = {
    # Qwen2.5 model cards / config.json (Hugging Face Qwen/Qwen2.5-*): layers, KV heads, head dim 128
    "qwen2.5-1.5b": Model(params=1.54e9, layers=28, kv_heads=2, head_dim=128, heads=12),
    "qwen2.5-3b": Model(params=3.09e9, layers=36, kv_heads=2, head_dim=128, heads=16),
    "qwen2.5-7b": Model(params=7.61e9, layers=28, kv_heads=4, head_dim=128, heads=28),
    "qwen2.5-32b": Model(params=32.5e9, layers=64, kv_heads=8, head_dim=128, heads=40),
    # Llama 3.1 8B / 70B model cards (meta-llama/Llama-3.1-*): 32/80 layers, 8 KV heads, head dim 128
    "llama3.1-8b": Model(params=8.03e9, layers=32, kv_heads=8, head_dim=128, heads=32),
    "llama3.1-70b": Model(params=70.6e9, layers=80, kv_heads=8, head_dim=128, heads=64),
    # Qwen3-30B-A3B model card (Qwen/Qwen3-30B-A3B): 30.5 B total, 3.3 B active (8 of 128 experts),
    # 48 layers, 32 query / 4 KV heads, head dim 128
    "qwen3-30b-a3b": Model(params=30.5e9, layers=48, kv_heads=4, head_dim=128, heads=32, active=3.3e9),
}
"""Model sizes by name (``docs/system.md#hardware``)."""


MEMORY_EFFICIENCY = 0.75
"""η_mem, the fraction of HBM bandwidth a decode step reaches: measured single-sequence vLLM decode of
Llama-3.1-8B, 75 tokens/s on an A100 40GB (vLLM 0.23; 77% of the 1.555 TB/s roofline, J. Musgrave,
"vLLM throughput-latency sweep on NVIDIA A100") and 6.48 ms per output token on an H100 SXM (vLLM 0.21;
74% of the 3.35 TB/s roofline, InferenceBench "concurrency sweep" recipe); the mean, rounded
(docs/system.md#hardware)."""
FLOP_EFFICIENCY = 0.5
"""η_flop, the fraction of peak bf16 FLOP/s the batched decode GEMMs and prefill reach. An assumption,
not a measurement: no public table this project found isolates it (docs/system.md#hardware names it
wherever it is used)."""


def gpu(name: str) -> GPU:
    try:
        return GPUS[name]
    except KeyError:
        raise ValueError(f"unknown gpu {name!r}; known: {', '.join(GPUS)}") from None


def model(name: str) -> Model:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def train_flops(params: float, tokens: float, recompute_passes: int = 0) -> float:
    """``(6 + 2·r) · N · T``: forward + backward (6·N·T) plus ``r`` forward-only log-prob passes."""
    return (6.0 + 2.0 * recompute_passes) * params * tokens


def train_step_seconds(
    gpu_name: str, model_name: str, tokens: float, gpus: int, mfu: float, recompute_passes: int = 0
) -> float:
    """``(6 + 2·r)·N·T / (gpus · peak · MFU)``."""
    return train_flops(model(model_name).params, tokens, recompute_passes) / (gpus * gpu(gpu_name).peak_bf16 * mfu)


def decode_step_costs(
    gpu_name: str, model_name: str, gpus: int = 1, context_tokens: float = 1000.0
) -> tuple[float, float]:
    """``(a, b)`` of a decode step ``a + b·n`` (module docstring): ``a`` the weights read once per step;
    ``b`` per sequence, its KV cache of ``context_tokens`` tokens read and its token's FLOPs (active
    parameters and attention over the context), over ``gpus`` GPUs' bandwidth and peak."""
    g, m = gpu(gpu_name), model(model_name)
    bandwidth = gpus * g.hbm * MEMORY_EFFICIENCY
    flops = gpus * g.peak_bf16 * FLOP_EFFICIENCY
    per_token = 2.0 * m.active_params + 4.0 * m.layers * m.attention_width * context_tokens
    return m.weight_bytes() / bandwidth, m.kv_bytes_per_token() * context_tokens / bandwidth + per_token / flops


def prefill_seconds_per_token(gpu_name: str, model_name: str, gpus: int = 1) -> float:
    """``2·N_act / (gpus · peak · η_flop)``: one prompt token's forward pass, compute-bound."""
    return 2.0 * model(model_name).active_params / (gpus * gpu(gpu_name).peak_bf16 * FLOP_EFFICIENCY)


def mean_context(median: float, sigma: float, max_tokens: float, prompt_tokens: float = 0.0) -> float:
    """Mean cached tokens of a sequence in flight: ``P + E[L'²] / (2·E[L'])`` with ``L' = min(L, c)``,
    ``L ~ LogNormal(ln median, sigma)``, ``c = max_tokens``. A decode step sees a sequence with probability
    proportional to its length (length-biased sampling), at a uniform point of it. Closed forms:
    ``E[L'^k] = e^(kμ + k²σ²/2) · Φ((ln c − μ − kσ²)/σ) + c^k · (1 − Φ((ln c − μ)/σ))``
    (the log-normal's limited moments, Klugman, Panjer & Willmot, Loss Models, appendix A).

    >>> round(mean_context(1000, 0.0, 8192, 100))
    600
    """
    from scipy.stats import norm

    if not (median > 0 and sigma >= 0 and max_tokens > 0 and prompt_tokens >= 0):
        raise ValueError(
            f"mean_context: expected median > 0, sigma >= 0, max_tokens > 0, prompt_tokens >= 0; got "
            f"{median}, {sigma}, {max_tokens}, {prompt_tokens}"
        )
    if sigma == 0:
        length = min(median, max_tokens)  # every sequence the same length: context uniform over it
        return float(prompt_tokens + length / 2)
    mu, z = math.log(median), math.log(max_tokens)

    def moment(k: int) -> float:
        tail = 0.0 if math.isinf(max_tokens) else max_tokens**k * norm.sf((z - mu) / sigma)
        return math.exp(k * mu + k * k * sigma**2 / 2) * norm.cdf((z - mu - k * sigma**2) / sigma) + tail

    return float(prompt_tokens + moment(2) / (2 * moment(1)))


EAGER_STEP_SECONDS_PER_LAYER = 4.20e-3 / 28
"""Host time per layer of one decode step of an engine without CUDA graphs (eager mode), the floor
:func:`eager_step_floor` scales by the layer count: 4.20 ms per output token at one request without CUDA
graphs (2.72 ms with them) for Qwen3-0.6B, 28 layers, in xLLM (xLLM-AI/xllm pull request 713). An
assumption wherever it is used: one measurement, of a C++ engine; a Python engine's eager step is longer
(~22 ms for a 28-layer 7B model in vLLM-Omni, vllm-project/vllm-omni issue 7960), so this is the low end
(docs/system.md#step_floor)."""


def eager_step_floor(model_name: str) -> float:
    """``layers · EAGER_STEP_SECONDS_PER_LAYER``: the least time of a decode step of an engine in eager mode,
    the host launching each layer's kernels one by one (the count grows with the layers, not the width)."""
    return model(model_name).layers * EAGER_STEP_SECONDS_PER_LAYER


MEMORY_UTILISATION = 0.9
"""Fraction of GPU memory an engine may use (vLLM's default ``gpu_memory_utilization``)."""


def kv_capacity_tokens(gpu_name: str, model_name: str, gpus: int = 1) -> int:
    """KV-cache tokens of an engine over ``gpus`` GPUs: ``⌊0.9 · (gpus · memory − weight bytes) / KV bytes
    per token⌋`` (all parameters held, a mixture-of-experts model's every expert)."""
    g, m = gpu(gpu_name), model(model_name)
    return int(math.floor((MEMORY_UTILISATION * gpus * g.memory - m.weight_bytes()) / m.kv_bytes_per_token()))


SGLANG_REQUESTS_PER_CONTEXT, SGLANG_MIN_REQUESTS, SGLANG_MAX_REQUESTS = 512, 2048, 4096


def sglang_max_running_requests(kv_tokens: int, context_len: int) -> int:
    """SGLang's cap on the requests an engine runs at once when ``max_running_requests`` is left unset
    (as AReaL leaves it): ``min(⌊K / 2⌋, min(max(⌊K / C · 512⌋, 2048), 4096))`` for a KV pool of ``K`` tokens
    (``max_total_num_tokens``) and a context length ``C``: the request-to-token pool's size
    (``ModelRunner.init_memory_pool``, ``python/sglang/srt/model_executor/model_runner.py``) and half the KV
    pool (``TpModelWorker``, ``python/sglang/srt/managers/tp_worker.py``), SGLang v0.4.6 (the rule is the same
    in its later ``resolve_max_num_reqs``). Above the cap SGLang queues; the KV pool binds first in most setups."""
    if kv_tokens < 2 or context_len < 1:
        raise ValueError(
            f"sglang_max_running_requests: expected kv_tokens >= 2 and context_len >= 1, got {kv_tokens}, {context_len}"
        )
    pool = min(
        max(int(kv_tokens / context_len * SGLANG_REQUESTS_PER_CONTEXT), SGLANG_MIN_REQUESTS), SGLANG_MAX_REQUESTS
    )
    return min(kv_tokens // 2, pool)


def sync_seconds(gpu_name: str, model_name: str) -> float:
    """Weight bytes over one GPU's interconnect bandwidth (a broadcast of bf16 weights)."""
    return model(model_name).weight_bytes() / gpu(gpu_name).link
