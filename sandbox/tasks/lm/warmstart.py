"""The "base model": a short supervised warm start on the task's format, cached on disk.

RL on a randomly initialised transformer has no signal (every reward is 0). Like a pretrained LLM,
the base model here already answers some prompts correctly: a few hundred teacher-forced
cross-entropy steps on (prompt, reference answer) pairs of the TRAIN set, stopped at the first
evaluation where greedy accuracy on a slice of the train set reaches ``target_accuracy`` (so RL
starts from partial accuracy, not from a solved task).

Determinism: the init, the batches and the optimizer are driven by ``warmstart.seed`` only; the
training always runs on the CPU in float32 (whatever ``task.device``), so one cached base model
serves every device. The module stays in eval mode (no dropout: the builtin transformer has none,
and a transformers config's dropout would draw from the global torch RNG). Both backends
(``task.model.backend``) train the same way, through :meth:`LMTask.new_module` and
:meth:`LMTask.module_forward`; a checkpoint (``task.model.path``) is fine-tuned from its weights.

The result is cached under ``$SANDBOX_CACHE_DIR`` (default: the platform's user cache directory,
``$XDG_CACHE_HOME/async-rl-sandbox/``, i.e. ``~/.cache/async-rl-sandbox/`` on Linux; :func:`cache_dir`) as
``lm-base-<key>.pt`` with a ``.json`` sidecar (accuracy, steps, seconds), the key being a hash of
the model (:func:`model_identity`), problem, prompt-set and warm-start configs. Saving uses
``torch.save(state_dict)``; loading uses ``torch.load(..., weights_only=True)`` (no pickled code).
The sidecar holds the SHA-256 of the ``.pt`` file: a cache file that is truncated, corrupted, or
has no checksum is never loaded; the base model is trained again and the cache rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from sandbox.base import progress
from sandbox.base.lazy_torch import lazy_import, no_grad
from sandbox.learner.optim import without_dynamo
from sandbox.models import hf
from sandbox.models.transformer import sample

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

FORMAT_VERSION = 1
LABEL = "warm start: training the base LM (cached after)"
"""The progress label of the warm start (:mod:`sandbox.base.progress`); its total is ``max_steps``, an
upper bound: the training stops at the first evaluation reaching ``target_accuracy``."""
TRAININGS = 0
"""How many warm starts this process has trained (the cache tests read it)."""


class WarmStartConfig(BaseModel):
    """Supervised warm start giving the base model partial accuracy."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = Field(
        True, description="Start RL from the warm-started base model (False: random init from run.init_seed)."
    )
    max_steps: int = Field(
        3000, ge=0, description="Upper bound on supervised steps (the target accuracy usually stops it earlier)."
    )
    batch_size: int = Field(64, ge=1, description="Sequences per supervised step.")
    lr: float = Field(3e-3, gt=0, description="Adam learning rate (3e-3 trains the 2-layer model in seconds).")
    warmup_steps: int = Field(20, ge=0, description="Linear LR warm-up steps.")
    target_accuracy: float | None = Field(
        0.35,
        gt=0,
        le=1,
        description="Stop at the first evaluation whose greedy accuracy on dev prompts reaches this; "
        "0.35 leaves RL room to improve while its groups have signal. None = run max_steps.",
    )
    eval_every: int = Field(10, ge=1, description="Steps between dev evaluations.")
    dev_size: int = Field(256, ge=1, description="Train prompts used as the dev slice for the stopping rule.")
    seed: int = Field(
        0,
        ge=0,
        le=2**63 - 1,
        description="Seed of the init, the batches and the order (the base model is shared by every run).",
    )


def cache_dir() -> Path:
    """``$SANDBOX_CACHE_DIR``, else the user cache directory of the platform (``platformdirs``):
    ``$XDG_CACHE_HOME/async-rl-sandbox``, by default ``~/.cache/async-rl-sandbox`` on Linux."""
    env = os.environ.get("SANDBOX_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_path

    return user_cache_path("async-rl-sandbox", appauthor=False)


def model_identity(task) -> dict:
    """What decides the base model's architecture and init. Builtin: the filled
    :class:`TransformerConfig` without its ``backend`` field (so caches written before backends
    existed stay valid). hf: the backend, the full transformers config the task builds (as JSON,
    including ``transformers_version``), the attention kernel, and for a checkpoint the SHA-256 of its
    files; two architectures or checkpoints never share a cache file."""
    if task.backend != "hf":
        # experts = 0 (the dense MLP) is left out: caches written before the option existed stay valid
        return task.model_cfg.model_dump(exclude={"backend"} | ({"experts"} if not task.model_cfg.experts else set()))
    spec = task.cfg.model
    return {
        "backend": "hf",
        "config": json.loads(task.model_cfg.to_json_string(use_diff=False)),
        "attn_implementation": spec.attn_implementation,
        "checkpoint": None if spec.path is None else hf.checkpoint_digest(spec.path),
    }


def cache_key(task) -> str:
    cfg = task.cfg
    payload = {
        "format": FORMAT_VERSION,
        "model": model_identity(task),
        "problem": cfg.problem.model_dump(),
        "train_size": cfg.train_size,
        "eval_size": cfg.eval_size,
        "prompt_seed": cfg.prompt_seed,
        "max_new_tokens": task.max_new,
        "alphabet": task.tokenizer.alphabet,
        "warmstart": cfg.warmstart.model_dump(exclude={"enabled"}),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def cache_paths(task) -> tuple[Path, Path]:
    base = cache_dir() / f"lm-base-{cache_key(task)}"
    return base.with_suffix(".pt"), base.with_suffix(".json")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_VERIFIED: dict[tuple, tuple[dict[str, Tensor], dict]] = {}
"""Cached base models this process has verified and loaded, by file, modification time, size and sidecar."""


def load_cached(task) -> tuple[dict[str, Tensor], dict] | None:
    """The cached base model if its file matches the checksum in its sidecar, else None. A file this process
    verified and loaded before, unchanged since (same inode, times, size and sidecar), is not read again
    (hashing and loading it was about a sixth of an LM run's fixed cost, ``benchmarks/README.md``); its tensors
    are shared, read only (the task copies them into its weights)."""
    path, meta_path = cache_paths(task)
    try:
        text = meta_path.read_text()
        st = path.stat()
        key = (str(path), st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, text)
        known = _VERIFIED.get(key)
        if known is not None:
            return dict(known[0]), dict(known[1])
        meta = json.loads(text)
        if not isinstance(meta, dict) or meta.get("sha256") != _sha256(path):
            return None
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError):
        return None
    if len(_VERIFIED) >= 8:
        _VERIFIED.clear()
    _VERIFIED[key] = (state, meta)
    return dict(state), dict(meta)


def load_or_train(task) -> tuple[dict[str, Tensor], dict]:
    """``(state_dict on CPU float32, metadata)`` of the base model, from the cache when it is
    present and intact (checksum), else trained and cached."""
    cached = load_cached(task)
    if cached is not None:
        return cached
    path, meta_path = cache_paths(task)
    state, meta = train_base_model(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        torch.save(state, tmp)
        meta = {**meta, "sha256": _sha256(tmp)}
        os.replace(tmp, path)
        tmpm = meta_path.with_suffix(f".tmp{os.getpid()}")
        tmpm.write_text(json.dumps(meta, indent=2))
        os.replace(tmpm, meta_path)  # last: a sidecar never vouches for a file it was not computed on
    finally:
        for t in (tmp, meta_path.with_suffix(f".tmp{os.getpid()}")):
            t.unlink(missing_ok=True)
    return state, meta


def _batch(task, idx: Tensor) -> tuple[Tensor, Tensor]:
    """Teacher-forcing inputs ``(B, P + A)`` and loss mask over the answer + end token."""
    ids = task.train_ids[idx]  # (B, P)
    answers = [task.train_answer_ids[int(i)] for i in idx]
    A = max(len(a) for a in answers)
    ans = torch.zeros(len(answers), A, dtype=torch.long)
    mask = torch.zeros(len(answers), A)
    for i, a in enumerate(answers):
        ans[i, : len(a)] = torch.tensor(a)
        mask[i, : len(a)] = 1.0
    return torch.cat([ids, ans], 1), mask


@no_grad
def greedy_accuracy(
    model: torch.nn.Module, task, prompt_ids: Tensor, prompts: list[str], batch: int = 512
) -> tuple[float, float]:
    """Greedy exact-answer accuracy and mean response length of ``model`` on ``prompt_ids``."""
    correct, total_len = 0.0, 0.0
    fwd = task.module_forward(model)
    for s in range(0, len(prompts), batch):
        ctx = prompt_ids[s : s + batch]
        toks, _, lens, hit = sample(fwd, ctx, task.max_new, task.tokenizer.eos_id, temperature=0.0)
        for j in range(ctx.shape[0]):
            if bool(hit[j]):
                correct += task.problem.score(prompts[s + j], task.tokenizer.decode(toks[j]))
        total_len += float(lens.sum())
    n = max(len(prompts), 1)
    return correct / n, total_len / n


def train_base_model(task) -> tuple[dict[str, Tensor], dict]:
    """Train the base model on one CPU thread (bitwise reproducible whatever the core count)."""
    global TRAININGS
    TRAININGS += 1
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(task)
    finally:
        torch.set_num_threads(threads)


def _train(task) -> tuple[dict[str, Tensor], dict]:
    ws = task.cfg.warmstart
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(ws.seed)
    model = task.new_module(gen)
    fwd = task.module_forward(model, use_cache=False)
    opt = without_dynamo(torch.optim.Adam)(model.parameters(), lr=ws.lr)  # torch.optim.Adam, no torch._dynamo import
    n_train = task.train_ids.shape[0]
    dev = torch.arange(min(ws.dev_size, n_train))
    dev_prompts = [task.train_prompts[i] for i in dev.tolist()]
    P = task.P
    steps, acc = 0, 0.0
    with progress.task(LABEL, total=ws.max_steps, unit="steps") as bar:  # a no-op outside a progress session
        for step in range(ws.max_steps + 1):
            if step % ws.eval_every == 0 or step == ws.max_steps:
                acc, _ = greedy_accuracy(model, task, task.train_ids[dev], dev_prompts)
                bar.update(
                    info=f"dev accuracy {acc:.2f}"
                    + (f" (stops at {ws.target_accuracy:.2f})" if ws.target_accuracy else "")
                )
                if (ws.target_accuracy is not None and acc >= ws.target_accuracy) or step == ws.max_steps:
                    break
            idx = torch.randint(n_train, (ws.batch_size,), generator=gen)
            seq, mask = _batch(task, idx)
            logits, _ = fwd(seq[:, :-1], None)
            logits = logits[:, P - 1 :]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), seq[:, P:].reshape(-1), reduction="none"
            )
            loss = (loss * mask.reshape(-1)).sum() / mask.sum()
            for g in opt.param_groups:
                g["lr"] = ws.lr * min(1.0, (step + 1) / max(ws.warmup_steps, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps = step + 1
            bar.advance()
    with progress.phase("warm start: held-out accuracy of the base LM"):
        held_acc, held_len = greedy_accuracy(model, task, task.eval_ids, task.eval_prompts)
    meta = {
        "key": cache_key(task),
        "steps": steps,
        "dev_accuracy": acc,
        "heldout_accuracy": held_acc,
        "heldout_mean_length": held_len,
        "train_seconds": time.perf_counter() - t0,
        "torch": torch.__version__,
        "params": sum(p.numel() for p in model.parameters()),
    }
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    return state, meta
