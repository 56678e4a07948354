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
* memory-bound decode step of an engine over ``g`` GPUs (tensor parallel) with ``n`` sequences
  in flight of mean context ``C`` tokens: ``a + b·n`` with ``a = weight bytes / (g · HBM)`` (every
  step reads the weights once) and ``b = KV bytes per token · C / (g · HBM)`` (each sequence's
  cache is read once per step), the roofline reading of decoding (Pope et al. 2022,
  arXiv 2211.05102, section 2);
* weight sync ``weight bytes / interconnect bandwidth``.

>>> round(decode_step_costs("H100", "qwen2.5-7b", gpus=1, context_tokens=1000)[0] * 1e3, 3)
4.543
>>> round(train_step_seconds("H100", "qwen2.5-7b", tokens=1_000_000, gpus=8, mfu=0.4, recompute_passes=1), 2)
19.24
"""

from __future__ import annotations

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
    """``params``: parameter count; ``layers``, ``kv_heads``, ``head_dim``: the attention shape that
    sizes the KV cache (grouped-query attention: ``kv_heads`` keys and values per layer)."""

    params: float
    layers: int
    kv_heads: int
    head_dim: int

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
    # NVIDIA H200 SXM datasheet: 989 TFLOPS bf16 dense (same die as H100), 4.8 TB/s, NVLink 900 GB/s
    "H200": GPU(peak_bf16=989e12, hbm=4.8e12, link=450e9, memory=141e9),
    # NVIDIA H20 (HGX H20 product brief): 148 TFLOPS bf16 dense, 4.0 TB/s, NVLink 900 GB/s, 96 GB
    "H20": GPU(peak_bf16=148e12, hbm=4.0e12, link=450e9, memory=96e9),
}
"""Accelerators by name (``docs/system.md#hardware`` cites each figure)."""

MODELS: dict[str, Model] = {
    # Qwen2.5 model cards / config.json (Hugging Face Qwen/Qwen2.5-*): layers, KV heads, head dim 128
    "qwen2.5-1.5b": Model(params=1.54e9, layers=28, kv_heads=2, head_dim=128),
    "qwen2.5-3b": Model(params=3.09e9, layers=36, kv_heads=2, head_dim=128),
    "qwen2.5-7b": Model(params=7.61e9, layers=28, kv_heads=4, head_dim=128),
    "qwen2.5-32b": Model(params=32.5e9, layers=64, kv_heads=8, head_dim=128),
    # Llama 3.1 8B / 70B model cards (meta-llama/Llama-3.1-*): 32/80 layers, 8 KV heads, head dim 128
    "llama3.1-8b": Model(params=8.03e9, layers=32, kv_heads=8, head_dim=128),
    "llama3.1-70b": Model(params=70.6e9, layers=80, kv_heads=8, head_dim=128),
}
"""Model sizes by name (``docs/system.md#hardware``)."""


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


def train_step_seconds(gpu_name: str, model_name: str, tokens: float, gpus: int, mfu: float,
                       recompute_passes: int = 0) -> float:
    """``(6 + 2·r)·N·T / (gpus · peak · MFU)``."""
    return train_flops(model(model_name).params, tokens, recompute_passes) / (gpus * gpu(gpu_name).peak_bf16 * mfu)


def decode_step_costs(gpu_name: str, model_name: str, gpus: int = 1, context_tokens: float = 1000.0) -> tuple[float, float]:
    """``(a, b)`` of a memory-bound decode step ``a + b·n``: weights read once per step, each sequence's
    KV cache (``context_tokens`` cached tokens) read once per step, over ``gpus`` GPUs' bandwidth."""
    g, m = gpu(gpu_name), model(model_name)
    bandwidth = gpus * g.hbm
    return m.weight_bytes() / bandwidth, m.kv_bytes_per_token() * context_tokens / bandwidth


def sync_seconds(gpu_name: str, model_name: str) -> float:
    """Weight bytes over one GPU's interconnect bandwidth (a broadcast of bf16 weights)."""
    return model(model_name).weight_bytes() / gpu(gpu_name).link
