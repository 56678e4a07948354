"""Batched trajectories: what a rollout worker hands the learner.

Every tensor carries a leading replica dimension ``R`` (independent learners under one event
schedule), then ``N`` responses, then ``T`` token positions (right-padded). The behaviour
log-probabilities and the version that produced each token are recorded at generation time, so
staleness and importance ratios are facts of the data, never inputs to the learning code.

A complete group of one-token responses (the bandit's, :meth:`Rollouts.one_token`) is kept as it was drawn,
``(R, N)`` tensors, until one of its ``(R, N, T)`` fields is read (:class:`OneTokenGroup`): the concatenation
of such groups, the learner's batch, is made from the draws, with the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from sandbox.base.lazy_torch import lazy_import

torch = lazy_import("torch", globals())
Tensor = lazy_import("torch:Tensor", globals())

NO_TOKEN = int(np.iinfo(np.int64).max)  # torch.iinfo(torch.int64).max, without torch
"""The oldest version of a response with no token: above every real version."""


def oldest_versions(versions: Tensor) -> Tensor:
    """``(..., T)`` int64 versions (negative on padding) → ``(...)`` the smallest non-negative one,
    :data:`NO_TOKEN` where there is none.

    Equal to ``versions.masked_fill(versions < 0, NO_TOKEN).amin(-1)``, computed as
    ``~max(~k)`` with ``k = clamp(v, -1) & NO_TOKEN`` (padding becomes ``NO_TOKEN``, versions stay):
    torch's CPU ``amin`` over int64 is about thirty times slower than ``amax``, and the in-place
    steps on one temporary spare the allocations of a masked copy."""
    keyed = versions.clamp(min=-1)
    keyed.bitwise_and_(NO_TOKEN)
    keyed.bitwise_not_()  # ~k = -k - 1 reverses the order, so the max of ~k is ~ (min of k)
    return keyed.amax(-1).bitwise_not_()


_ONE_TOKEN_SHAPES: dict[tuple[int, int], tuple[Tensor, Tensor, int, int]] = {}


def _complete_one_token(replicas: int, responses: int) -> tuple[Tensor, Tensor]:
    """``(lengths, ended)`` of a complete one-token group, ``ones(R, N)`` as int64 and as bool, shared by the
    groups of that shape: nothing writes to a group's lengths or ended flags (if anything did, their version
    counters would tell, and new tensors would be made)."""
    key = (replicas, responses)
    cached = _ONE_TOKEN_SHAPES.get(key)
    if cached is None or cached[0]._version != cached[2] or cached[1]._version != cached[3]:
        lengths, ended = torch.ones(key, dtype=torch.long), torch.ones(key, dtype=torch.bool)
        cached = _ONE_TOKEN_SHAPES[key] = (lengths, ended, lengths._version, ended._version)
    return cached[0], cached[1]


_ONE_TOKEN_MASKS: dict[tuple[int, int], tuple[Tensor, int]] = {}

_ONE_TOKEN_VERSIONS: dict[tuple[int, int], tuple[Tensor, int, int]] = {}


def one_token_versions(replicas: int, responses: int, version: int) -> Tensor:
    """The :attr:`Rollouts.token_versions` of a complete one-token group sampled by ``version``,
    ``full((R, N, 1), version)`` int64, shared by the groups of that shape and version like
    :func:`_complete_one_token` (the groups of a synchronous step are sampled with one version): nothing
    writes to a group's token versions; a write would show in the version counter, and a new one is made.
    One per shape (the last version asked for)."""
    key = (replicas, responses)
    cached = _ONE_TOKEN_VERSIONS.get(key)
    if cached is None or cached[1] != version or cached[0]._version != cached[2]:
        versions = torch.full((replicas, responses, 1), version, dtype=torch.long)
        cached = _ONE_TOKEN_VERSIONS[key] = (versions, version, versions._version)
    return cached[0]


def one_token_mask(replicas: int, responses: int) -> Tensor:
    """The :attr:`Rollouts.mask` of a complete one-token group, ``ones(R, N, 1)`` float32 (the comparison
    ``0 < 1`` writes 1.0), shared like :func:`_complete_one_token` (a write to it makes a new one)."""
    key = (replicas, responses)
    cached = _ONE_TOKEN_MASKS.get(key)
    if cached is None or cached[0]._version != cached[1]:
        mask = torch.ones(replicas, responses, 1, dtype=torch.float32)
        cached = _ONE_TOKEN_MASKS[key] = (mask, mask._version)
    return cached[0]


def _shared_one_token_version(parts: list[Rollouts]) -> int | None:
    """The version whose :func:`one_token_versions` every part holds, unchanged (the groups of one synchronous
    step), else None: their concatenation is then ``full((R, n, 1), version)``, the shared one of that shape."""
    versions = parts[0].token_versions
    cached = _ONE_TOKEN_VERSIONS.get(tuple(versions.shape[:2]))
    if cached is None or cached[0] is not versions or versions._version != cached[2]:
        return None
    for p in parts:
        if p.token_versions is not versions:
            return None
    return cached[1]


def _is_complete_one_token(part: Rollouts) -> bool:
    """Whether ``part`` holds :func:`_complete_one_token`'s shared lengths, unchanged, and one position:
    every response one valid token (what :meth:`Rollouts.one_token` builds)."""
    lengths = part.lengths
    cached = _ONE_TOKEN_SHAPES.get(tuple(lengths.shape))
    return (
        cached is not None
        and cached[0] is lengths
        and lengths._version == cached[2]
        and part.ended is cached[1]
        and part.ended._version == cached[3]
        and part.tokens.shape[-1] == 1
    )


@dataclass
class Rollouts:
    tokens: Tensor
    """``(R, N, T)`` int64 sampled tokens (0 on padding)."""
    behaviour_logp: Tensor
    """``(R, N, T)`` log μ(y_t|s_t) of the sampler that produced each token (0 on padding)."""
    token_versions: Tensor
    """``(R, N, T)`` int64 policy version that produced each token (-1 on padding)."""
    lengths: Tensor
    """``(R, N)`` int64 number of valid tokens."""
    ended: Tensor
    """``(R, N)`` bool: the response is complete (end token or horizon reached)."""
    group_size: int
    prompts: Tensor | None = None
    """``(R, N, P)`` task-specific context (None for context-free toys)."""
    rewards: Tensor | None = None
    """``(R, N)`` scalar rewards, set once the response is complete."""
    info: dict = field(default_factory=dict)
    version_logp: Tensor | None = None
    """``(R, N, T)`` the trainer's exact float32 log π_v(y_t|s_t) under the weights of the version that
    sampled each token (0 on padding); None: equal to :attr:`behaviour_logp` (the exact engine, whose
    reported log-probs are the trainer's: nothing is stored twice). ``docs/engines.md``."""
    _mask: tuple | None = field(default=None, init=False, repr=False, compare=False)
    """The last :attr:`mask` with what it was computed from (lengths, their version counter, width)."""
    _longest: tuple | None = field(default=None, init=False, repr=False, compare=False)
    """(lengths, their version counter, the longest length, their sum) when the builder knows them
    (:meth:`one_token`, :meth:`cat` of such groups)."""

    @classmethod
    def empty(cls, replicas: int, group_size: int, prompts: Tensor | None = None) -> Rollouts:
        """A group of ``group_size`` responses per replica with no tokens yet."""
        return cls(
            tokens=torch.zeros(replicas, group_size, 0, dtype=torch.long),
            behaviour_logp=torch.zeros(replicas, group_size, 0),
            token_versions=torch.zeros(replicas, group_size, 0, dtype=torch.long),
            lengths=torch.zeros(replicas, group_size, dtype=torch.long),
            ended=torch.zeros(replicas, group_size, dtype=torch.bool),
            group_size=group_size,
            prompts=prompts,
        )

    @classmethod
    def one_token(cls, tokens: Tensor, logp: Tensor, version: int) -> Rollouts:
        """A complete group whose every response is the one token ``tokens[r, n]`` (``(R, N)`` int64), with
        behaviour log-probs ``logp`` (``(R, N)``), sampled by ``version``: the group that
        ``empty(R, N).extend(tokens[..., None], logp[..., None], ones, ones.bool(), version)`` returns, built
        without the empty group and the concatenations (:class:`OneTokenGroup`: its ``(R, N, 1)`` fields are
        made when first read)."""
        if _one_token_inputs(tokens, logp):
            return OneTokenGroup.of(tokens, logp, version, None, tokens.shape[1])
        return cls._extended_one_token(tokens, logp, version)

    @classmethod
    def one_token_drawn(cls, tokens: Tensor, log_policy: Tensor, version: int) -> Rollouts:
        """:meth:`one_token` with behaviour log-probs ``log_policy.gather(-1, tokens)`` (``log_policy``: the
        ``(R, K)`` log-probabilities of the sampler, a tensor nobody writes to), gathered when first read: the
        concatenation of groups drawn from one ``log_policy`` gathers once (the same values: a gather copies)."""
        if _one_token_inputs(tokens, log_policy):
            return OneTokenGroup.of(tokens, log_policy, version, log_policy._version, tokens.shape[1])
        return cls._extended_one_token(tokens, log_policy.gather(-1, tokens), version)

    @classmethod
    def _extended_one_token(cls, tokens: Tensor, logp: Tensor, version: int) -> Rollouts:
        """The general path of :meth:`one_token` (``extend`` converts or copies what it is given)."""
        R, N = tokens.shape
        ones = torch.ones(R, N, dtype=torch.long)
        return cls.empty(R, N).extend(tokens.unsqueeze(-1), logp.unsqueeze(-1), ones, ones.bool(), version)

    @property
    def sampler_logp(self) -> Tensor:
        """:attr:`version_logp`, or :attr:`behaviour_logp` itself when the engine is exact (None stored)."""
        return self.behaviour_logp if self.version_logp is None else self.version_logp

    @property
    def num_replicas(self) -> int:
        return self.tokens.shape[0]

    @property
    def num_responses(self) -> int:
        return self.tokens.shape[1]

    @property
    def width(self) -> int:
        return self.tokens.shape[2]

    @property
    def mask(self) -> Tensor:
        """``(R, N, T)`` float 1.0 on valid tokens. Computed once per lengths and width: the tensor
        is shared by every reader (modifying it in place makes the next read recompute it)."""
        cached = self._mask
        lengths, width = self.lengths, self.width
        if (
            cached is not None
            and cached[0] is lengths
            and cached[1] == lengths._version
            and cached[2] == width
            and cached[3]._version == cached[4]
        ):
            return cached[3]
        pos = torch.arange(width, device=self.tokens.device)
        # The comparison writes 1.0 / 0.0 itself: a bool result and its conversion cost several times more on CPU.
        mask = torch.lt(
            pos,
            lengths.unsqueeze(-1),
            out=torch.empty(*lengths.shape, width, dtype=torch.float32, device=lengths.device),
        )
        self._mask = (lengths, lengths._version, width, mask, mask._version)
        return mask

    @property
    def full(self) -> bool:
        """Whether every position of every response is known to hold a token (the mask is all ones) without
        reading a tensor: complete one-token groups (:meth:`one_token`, :meth:`cat` of them). False: not known."""
        return _is_complete_one_token(self)

    @property
    def padded(self) -> bool:
        """Whether some response is shorter than the width (the mask holds a 0)."""
        return bool(self.lengths.numel()) and int(self.lengths.min()) < self.width

    @property
    def decode_steps(self) -> int:
        """Decode steps a batched engine needs for this group: its longest response."""
        known = self._longest
        if known is not None and known[0] is self.lengths and known[1] == self.lengths._version:
            return known[2]
        return int(self.lengths.max().item()) if self.lengths.numel() else 0

    @property
    def token_count(self) -> int:
        known = self._longest
        if known is not None and len(known) > 3 and known[0] is self.lengths and known[1] == self.lengths._version:
            return known[3]
        return int(self.lengths.sum().item())

    def replica(self, r: int) -> Rollouts:
        """Replica ``r``'s responses as a one-replica group ``(1, N, w)``, ``w`` its longest response: the
        group a one-replica run holds (its width is its longest response; padding that other replicas'
        longer responses added is dropped). Views, not copies."""
        w = int(self.lengths[r].max()) if self.lengths.shape[1] else 0
        cut = lambda t: None if t is None else t[r : r + 1, :, :w]  # noqa: E731
        row = lambda t: None if t is None else t[r : r + 1]  # noqa: E731
        return Rollouts(
            tokens=cut(self.tokens),
            behaviour_logp=cut(self.behaviour_logp),
            token_versions=cut(self.token_versions),
            lengths=row(self.lengths),
            ended=row(self.ended),
            group_size=self.group_size,
            prompts=row(self.prompts),
            rewards=row(self.rewards),
            info=dict(self.info),
            version_logp=cut(self.version_logp),
        )

    def truncate(self, positions: int) -> Rollouts:
        """Keep only the first ``positions`` token positions (an interrupted generation)."""
        lengths = self.lengths.clamp(max=positions)
        ended = self.ended & (self.lengths <= positions)
        return self._cut(lengths, ended, max(positions, 0))

    def truncate_each(self, positions: Tensor) -> Rollouts:
        """Keep the first ``positions[r, n]`` tokens of each response (``(R, N)`` int64): responses interrupted
        at their own positions (an engine's sequences at a weight sync, each at its own decode step). A
        response cut before its end is no longer ended; the width becomes the longest kept response."""
        positions = torch.as_tensor(positions, dtype=torch.long).reshape(self.lengths.shape)
        lengths = torch.minimum(self.lengths, positions.clamp_min(0))
        ended = self.ended & (self.lengths <= positions)
        return self._cut(lengths, ended, int(lengths.max()) if lengths.numel() else 0)

    def _cut(self, lengths: Tensor, ended: Tensor, width: int) -> Rollouts:
        """The first ``width`` token positions with the given lengths and end flags, padding cleared."""
        keep = slice(0, width)
        out = replace(
            self,
            tokens=self.tokens[..., keep],
            behaviour_logp=self.behaviour_logp[..., keep],
            token_versions=self.token_versions[..., keep],
            lengths=lengths,
            ended=ended,
            version_logp=None if self.version_logp is None else self.version_logp[..., keep],
        )
        return out._clear_padding()

    def _clear_padding(self) -> Rollouts:
        if not self.padded:
            return self  # every response fills every position: no padding to clear
        m = self.mask.bool()
        self.tokens = self.tokens.masked_fill(~m, 0)
        self.behaviour_logp = self.behaviour_logp.masked_fill(~m, 0.0)
        self.token_versions = self.token_versions.masked_fill(~m, -1)
        if self.version_logp is not None:
            self.version_logp = self.version_logp.masked_fill(~m, 0.0)
        return self

    def oldest_version(self) -> Tensor:
        """``(R, N)`` oldest version among a response's tokens (its head version); the int64
        maximum for a response with no token."""
        return oldest_versions(self.token_versions)

    def newest_version(self) -> Tensor:
        """``(R, N)`` newest version among a response's tokens (its tail version)."""
        return self.token_versions.amax(-1)

    @staticmethod
    def cat(parts: list[Rollouts]) -> Rollouts:
        """Concatenate along responses, right-padding to the widest part."""
        if not parts:
            raise ValueError("cannot concatenate an empty list of rollouts")
        if all(type(p) is OneTokenGroup for p in parts):
            out = OneTokenGroup.cat(parts)
            if out is not None:
                return out
        width = max(p.width for p in parts)

        def pad(t: Tensor, value) -> Tensor:
            extra = width - t.shape[-1]
            return torch.nn.functional.pad(t, (0, extra), value=value) if extra else t

        group_sizes = {p.group_size for p in parts}
        if len(group_sizes) != 1:
            raise ValueError(f"parts have different group sizes {sorted(group_sizes)}")
        prompts = None
        if parts[0].prompts is not None:
            pw = max(p.prompts.shape[-1] for p in parts)
            prompts = torch.cat([torch.nn.functional.pad(p.prompts, (0, pw - p.prompts.shape[-1])) for p in parts], 1)
        rewards = None if any(p.rewards is None for p in parts) else torch.cat([p.rewards for p in parts], 1)
        version_logp = None
        if any(p.version_logp is not None for p in parts):
            version_logp = torch.cat([pad(p.sampler_logp, 0.0) for p in parts], 1)
        if all(map(_is_complete_one_token, parts)):
            # Complete one-token groups: the lengths and end flags are ones, as their concatenation would be, and
            # so is the mask; shared per shape (their version counters checked, as for each group's).
            R, n = parts[0].lengths.shape[0], sum(p.lengths.shape[1] for p in parts)
            lengths, ended = _complete_one_token(R, n)
            version = _shared_one_token_version(parts)
            out = Rollouts(
                tokens=torch.cat([p.tokens for p in parts], 1),
                behaviour_logp=torch.cat([p.behaviour_logp for p in parts], 1),
                token_versions=torch.cat([p.token_versions for p in parts], 1)
                if version is None
                else one_token_versions(R, n, version),
                lengths=lengths,
                ended=ended,
                group_size=parts[0].group_size,
                prompts=prompts,
                rewards=rewards,
                version_logp=version_logp,
            )
            mask = one_token_mask(R, n)
            out._mask = (lengths, lengths._version, 1, mask, mask._version)
            out._longest = (lengths, lengths._version, 1 if R * n else 0, R * n)
            return out
        return Rollouts(
            tokens=torch.cat([pad(p.tokens, 0) for p in parts], 1),
            behaviour_logp=torch.cat([pad(p.behaviour_logp, 0.0) for p in parts], 1),
            token_versions=torch.cat([pad(p.token_versions, -1) for p in parts], 1),
            lengths=torch.cat([p.lengths for p in parts], 1),
            ended=torch.cat([p.ended for p in parts], 1),
            group_size=parts[0].group_size,
            prompts=prompts,
            rewards=rewards,
            version_logp=version_logp,
        )

    def extend(
        self,
        new_tokens: Tensor,
        new_logp: Tensor,
        new_lengths: Tensor,
        new_ended: Tensor,
        version: int | Tensor,
        new_version_logp: Tensor | None = None,
    ) -> Rollouts:
        """Append a continuation generated by ``version`` after each response's current end.

        ``new_tokens``/``new_logp`` are ``(R, N, S)``, valid for the first ``new_lengths`` positions.
        All unfinished responses of a group sit at the same position (they decode in lock-step), so
        the continuation is placed at ``self.width`` for responses that have not ended.
        ``version``: one for every replica, or an ``(R,)`` int64 tensor (replicas under their own
        schedules hold different versions). The first continuation of a group is kept as it is
        when it is contiguous and of the group's dtypes (no copy): a task hands over tensors it
        does not write afterwards. ``new_version_logp``: the trainer's exact log-probs of the continuation
        when the engine is not exact (None: equal to ``new_logp``).
        """
        if isinstance(version, Tensor):
            versions = version.view(-1, 1, 1).expand(new_tokens.shape)  # only read by the cat below
        else:
            versions = torch.full_like(new_tokens, version)
        out = Rollouts(
            tokens=_append(self.tokens, new_tokens),
            behaviour_logp=_append(self.behaviour_logp, new_logp),
            token_versions=_append(self.token_versions, versions),
            lengths=torch.where(self.ended, self.lengths, self.lengths + new_lengths),
            ended=self.ended | new_ended,
            group_size=self.group_size,
            prompts=self.prompts,
        )
        if new_version_logp is not None or self.version_logp is not None:
            out.version_logp = _append(self.sampler_logp, new_logp if new_version_logp is None else new_version_logp)
        return out._clear_padding()

    def extend_each(
        self,
        new_tokens: Tensor,
        new_logp: Tensor,
        new_lengths: Tensor,
        new_ended: Tensor,
        version: int | Tensor,
        new_version_logp: Tensor | None = None,
    ) -> Rollouts:
        """:meth:`extend` for unfinished responses at their own positions: response ``(r, n)``'s continuation
        ``new_*[r, n, :new_lengths[r, n]]`` is written from position ``lengths[r, n]`` on (not from the
        group's width), every token stamped with ``version`` (one, or ``(R,)`` per replica)."""
        R, N, S = new_tokens.shape
        live = ~self.ended
        start = self.lengths
        grow = torch.where(live, new_lengths, torch.zeros_like(new_lengths))
        width = max(self.width, int((start + grow).max()) if grow.numel() else 0)

        def widen(t: Tensor, value) -> Tensor:
            extra = width - t.shape[-1]
            return torch.nn.functional.pad(t, (0, extra), value=value) if extra else t.clone()

        j = torch.arange(S)
        valid = live.unsqueeze(-1) & (j < grow.unsqueeze(-1))
        r_i, n_i, s_i = valid.nonzero(as_tuple=True)
        pos = start[r_i, n_i] + s_i
        if isinstance(version, Tensor):
            versions = version.view(-1, 1, 1).expand(new_tokens.shape).to(torch.long)
        else:
            versions = torch.full_like(new_tokens, version)

        def put(old: Tensor, value, new: Tensor) -> Tensor:
            out = widen(old, value)
            out[r_i, n_i, pos] = new[r_i, n_i, s_i].to(out.dtype)
            return out

        out = Rollouts(
            tokens=put(self.tokens, 0, new_tokens),
            behaviour_logp=put(self.behaviour_logp, 0.0, new_logp),
            token_versions=put(self.token_versions, -1, versions),
            lengths=start + grow,
            ended=self.ended | new_ended,
            group_size=self.group_size,
            prompts=self.prompts,
        )
        if new_version_logp is not None or self.version_logp is not None:
            out.version_logp = put(self.sampler_logp, 0.0, new_logp if new_version_logp is None else new_version_logp)
        return out._clear_padding()


def _append(old: Tensor, new: Tensor) -> Tensor:
    """``old`` followed by ``new`` along the last dimension. A group with no token yet takes a
    contiguous continuation of its dtype and device as it is (the copy ``torch.cat`` would make
    holds the same numbers; the task hands over a tensor it no longer writes)."""
    if (
        old.shape[-1] == 0
        and new.shape[:-1] == old.shape[:-1]
        and new.dtype == old.dtype
        and new.device == old.device
        and new.is_contiguous()
    ):
        return new
    return torch.cat([old, new], -1)


def _one_token_inputs(tokens: Tensor, logp: Tensor) -> bool:
    """Whether ``extend`` would keep ``tokens`` (``(R, N)``) and ``logp`` (``(R, N)`` or ``(R, K)``) as they are
    (int64 and the default float dtype, contiguous): :class:`OneTokenGroup` holds them."""
    return (
        tokens.dtype == torch.long
        and logp.dtype == torch.get_default_dtype()
        and tokens.is_contiguous()
        and logp.is_contiguous()
    )


def _made(name: str) -> property:
    """The field ``name`` of a :class:`OneTokenGroup`: its first read or assignment makes the fields."""

    def get(self):
        self._make_fields()
        return self.__dict__[name]

    def put(self, value) -> None:
        self._make_fields()
        self.__dict__[name] = value

    return property(get, put, doc=f"{name} (made from the draw when first read or assigned)")


class OneTokenGroup(Rollouts):
    """A complete group of one-token responses as it was drawn, its ``(R, N, 1)`` fields not made yet.

    It holds the draw ``(tokens, logp, version, seen)``: ``tokens`` ``(R, N)`` int64; ``logp`` the ``(R, N)``
    behaviour log-probs (``seen`` None) or the ``(R, K)`` log-policy they are gathered from,
    ``logp.gather(-1, tokens)``, a tensor nobody writes to (``seen``: its version counter at the draw, checked
    when it is gathered); ``version`` the sampler's (an int, or the ``(R, N, 1)`` token versions of a
    concatenation of groups of several versions).

    The fields of :class:`Rollouts` that :meth:`Rollouts.one_token` defines (``tokens[..., None]``, the behaviour
    log-probs ``[..., None]``, the token versions, ones for the lengths and end flags) are made when one of them is
    first read or assigned; the group then becomes a plain :class:`Rollouts` holding them (its class changes), so
    every reader sees the usual fields and every writer writes to them. Until then its sizes, mask and
    :attr:`full` are known from the draw, :attr:`drawn_tokens` gives the ``(R, N)`` tokens (the bandit's rewards
    and log-probs), and :meth:`Rollouts.cat` of such groups concatenates the ``(R, N)`` draws: the same values,
    with no per-group view, and the log-probs of groups drawn from one log-policy gathered once."""

    def __new__(cls, *args, **fields):
        """``OneTokenGroup(**fields)`` (``dataclasses.replace`` of one) is a plain :class:`Rollouts`; the group of
        a draw is made by :meth:`of`."""
        if args or fields:
            return Rollouts(*args, **fields)
        return super().__new__(cls)

    @classmethod
    def of(
        cls,
        tokens: Tensor,
        logp: Tensor,
        version: int | Tensor,
        seen: int | None,
        group_size: int,
        rewards: Tensor | None = None,
    ) -> OneTokenGroup:
        """The group of a draw (see the class)."""
        group = object.__new__(cls)
        d = group.__dict__
        d["group_size"], d["rewards"], d["_draw"] = group_size, rewards, (tokens, logp, version, seen)
        return group

    # Properties of this class only: once the fields are made, the group is a Rollouts that holds them.
    tokens = _made("tokens")
    behaviour_logp = _made("behaviour_logp")
    token_versions = _made("token_versions")
    lengths = _made("lengths")
    ended = _made("ended")

    @property
    def info(self) -> dict:
        return self.__dict__.setdefault("info", {})

    @info.setter
    def info(self, value: dict) -> None:
        self.__dict__["info"] = value

    def __reduce_ex__(self, protocol):
        """A copy or pickle of the group is one of the plain group it becomes (its fields made first)."""
        self._make_fields()
        return self.__reduce_ex__(protocol)

    def _make_fields(self) -> None:
        """Make the fields from the draw and become a plain :class:`Rollouts`."""
        draw = self._draw
        tokens, version = draw[0], draw[2]
        R, N = tokens.shape
        lengths, ended = _complete_one_token(R, N)
        mask = one_token_mask(R, N)
        d = self.__dict__
        d["tokens"] = tokens.unsqueeze(-1)
        d["behaviour_logp"] = _behaviour_logp(draw).unsqueeze(-1)
        d["token_versions"] = version if isinstance(version, Tensor) else one_token_versions(R, N, version)
        d["lengths"], d["ended"] = lengths, ended
        d["_mask"] = (lengths, lengths._version, 1, mask, mask._version)
        d["_longest"] = (lengths, lengths._version, 1 if R * N else 0, R * N)
        if "info" not in d:
            d["info"] = {}
        del d["_draw"]
        self.__class__ = Rollouts

    @property
    def num_replicas(self) -> int:
        return self._draw[0].shape[0]

    @property
    def num_responses(self) -> int:
        return self._draw[0].shape[1]

    @property
    def width(self) -> int:
        return 1

    @property
    def mask(self) -> Tensor:
        return one_token_mask(*self._draw[0].shape)

    @property
    def full(self) -> bool:
        return True

    @property
    def padded(self) -> bool:
        return False

    @property
    def decode_steps(self) -> int:
        return 1 if self._draw[0].numel() else 0

    @property
    def token_count(self) -> int:
        return self._draw[0].numel()

    @property
    def drawn_tokens(self) -> Tensor:
        """The ``(R, N)`` tokens, ``tokens[..., 0]``, without making the fields."""
        return self._draw[0]

    @staticmethod
    def cat(parts: list[OneTokenGroup]) -> OneTokenGroup | None:
        """:meth:`Rollouts.cat` of such groups, itself one; None when prompts or engine log-probs were assigned to
        one (the general concatenation then). The ``(R, N)`` tokens and behaviour log-probs are concatenated (those
        drawn from one log-policy gathered once, from the concatenated tokens); the versions are the one int they
        share, else the concatenation of each group's ``full((R, N, 1), version)``."""
        group_size = parts[0].group_size
        for p in parts:
            if p.group_size != group_size:
                raise ValueError(f"parts have different group sizes {sorted({p.group_size for p in parts})}")
            if p.prompts is not None or p.version_logp is not None:
                return None
        draws = [p._draw for p in parts]
        first = draws[0]
        tokens = torch.cat([d[0] for d in draws], 1)
        table, version = first[1], first[2]
        if first[3] is not None and all(d[1] is table and d[3] == first[3] for d in draws):
            logp = _behaviour_logp((tokens, table, version, first[3]))
        else:
            logp = torch.cat([_behaviour_logp(d) for d in draws], 1)
        if isinstance(version, Tensor) or any(isinstance(d[2], Tensor) or d[2] != version for d in draws):
            R = tokens.shape[0]
            version = torch.cat(
                [
                    d[2] if isinstance(d[2], Tensor) else torch.full((R, d[0].shape[1], 1), d[2], dtype=torch.long)
                    for d in draws
                ],
                1,
            )
        rewards = None
        if all(p.rewards is not None for p in parts):
            rewards = torch.cat([p.rewards for p in parts], 1)
        return OneTokenGroup.of(tokens, logp, version, None, group_size, rewards)


def _behaviour_logp(draw: tuple) -> Tensor:
    """The ``(R, N)`` behaviour log-probs of a :class:`OneTokenGroup` draw."""
    tokens, logp, _, seen = draw
    if seen is None:
        return logp
    if logp._version != seen:
        raise RuntimeError(
            "the log-policy a one-token group was drawn from was written to in place before its log-probs were "
            "gathered: a task hands Rollouts.one_token_drawn a tensor it no longer writes"
        )
    return logp.gather(-1, tokens)
