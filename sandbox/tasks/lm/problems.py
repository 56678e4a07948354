"""Character-level tokenizer and synthetic problems with verifiable rewards.

Every problem renders a prompt of a FIXED number of characters (left-padded with spaces, which the
model simply reads as characters, so no attention mask is needed) and a reference answer of variable
length; the model answers with characters followed by the end token. The reward is a pure function
of the prompt text and the response text, so it never needs side information: a verifier parses
the prompt.

* ``addition``: ``"  37+512="`` → ``"549"`` (optionally written least-significant digit first,
  which small transformers learn much faster: the carry then flows left to right).
* ``countdown``: ``"3,7,9>30:"`` → an expression using every given number exactly once with
  ``+ - *`` and the usual precedence, equal to the target (e.g. ``"3*7+9"``). Targets are made from a
  random expression, so a solution always exists; any correct expression earns the reward.
* ``sort`` / ``reverse``: ``"   4912>"`` → ``"1249"`` / ``"2194"`` (lengths vary per prompt).

Prompt sets are drawn deterministically from a seed: a train set and a disjoint held-out set.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

PAD, EOS = 0, 1
ALPHABET = " 0123456789+-*=,:>"


class CharTokenizer:
    """Token 0 is padding, token 1 the end of a response, then one token per character."""

    def __init__(self, alphabet: str = ALPHABET):
        self.alphabet = alphabet
        self.stoi = {c: i + 2 for i, c in enumerate(alphabet)}
        self.itos = {i + 2: c for i, c in enumerate(alphabet)}
        self.pad_id, self.eos_id = PAD, EOS

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 2

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError as exc:
            raise ValueError(f"character {exc.args[0]!r} is not in the alphabet {self.alphabet!r}") from None

    def decode(self, ids) -> str:
        """Characters up to (not including) the first end token; padding is skipped."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i in self.itos:
                out.append(self.itos[i])
        return "".join(out)


def _pad(text: str, width: int) -> str:
    if len(text) > width:
        raise ValueError(f"prompt {text!r} longer than {width}")
    return " " * (width - len(text)) + text


# -- problems ----------------------------------------------------------------------------------


class AdditionConfig(BaseModel):
    """Multi-digit addition ``a+b=``; operand digit counts drawn uniformly from 1..digits, so answer
    lengths vary."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    exact_answer: ClassVar[bool] = True
    """``score(prompt, response)`` is 1 exactly when ``response`` is the reference answer ``make`` returned
    with the prompt, else 0 (``LMTask.rewards`` compares tokens)."""
    kind: Literal["addition"] = "addition"
    digits: int = Field(
        3, ge=1, le=9, description="Max digits per operand; 3 is learnable by a 2-layer model in a minute."
    )
    reverse_answer: bool = Field(
        True,
        description="Write the sum least-significant digit first (the carry then flows in decoding order); "
        "the standard trick that makes addition learnable by small transformers.",
    )

    @property
    def prompt_len(self) -> int:
        return 2 * self.digits + 2

    @property
    def max_answer_len(self) -> int:
        return self.digits + 1

    def make(self, rng: np.random.Generator) -> tuple[str, str]:
        a = int(rng.integers(0, 10 ** int(rng.integers(1, self.digits + 1))))
        b = int(rng.integers(0, 10 ** int(rng.integers(1, self.digits + 1))))
        return _pad(f"{a}+{b}=", self.prompt_len), self.answer(a, b)

    def answer(self, a: int, b: int) -> str:
        s = str(a + b)
        return s[::-1] if self.reverse_answer else s

    def score(self, prompt: str, response: str) -> float:
        m = re.fullmatch(r"\s*(\d+)\+(\d+)=", prompt)
        if m is None:
            raise ValueError(f"not an addition prompt: {prompt!r}")
        return float(response == self.answer(int(m.group(1)), int(m.group(2))))


def eval_expression(expr: str) -> int | None:
    """Value of ``n (op n)*`` with ``op`` in ``+ - *`` and the usual precedence; None if malformed."""
    if not re.fullmatch(r"\d{1,3}([+\-*]\d{1,3})*", expr):
        return None
    nums = [int(x) for x in re.findall(r"\d+", expr)]
    ops = re.findall(r"[+\-*]", expr)
    terms, signs = [nums[0]], [1]
    for op, n in zip(ops, nums[1:]):
        if op == "*":
            terms[-1] *= n
        else:
            terms.append(n)
            signs.append(1 if op == "+" else -1)
    return sum(s * t for s, t in zip(signs, terms))


class CountdownConfig(BaseModel):
    """Countdown-style: reach the target with every given number used exactly once (``+ - *``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    kind: Literal["countdown"] = "countdown"
    numbers: int = Field(3, ge=2, le=5, description="Numbers given per prompt (3 keeps answers short: 5 characters).")
    max_number: int = Field(9, ge=1, le=99, description="Numbers are drawn from 1..max_number (9: one digit each).")
    partial_credit: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Reward for a well-formed expression using exactly the given numbers but missing the target.",
    )

    @property
    def _nd(self) -> int:
        return len(str(self.max_number))

    @property
    def prompt_len(self) -> int:
        tmax = self.max_number**self.numbers
        return self.numbers * (self._nd + 1) + len(str(tmax)) + 1

    @property
    def max_answer_len(self) -> int:
        return self.numbers * (self._nd + 1) - 1

    def make(self, rng: np.random.Generator) -> tuple[str, str]:
        while True:
            nums = [int(x) for x in rng.integers(1, self.max_number + 1, self.numbers)]
            order = rng.permutation(self.numbers)
            ops = rng.choice(list("+-*"), self.numbers - 1)
            expr = str(nums[order[0]]) + "".join(o + str(nums[i]) for o, i in zip(ops, order[1:]))
            target = eval_expression(expr)
            if target is not None and target >= 0:
                prompt = ",".join(str(n) for n in nums) + f">{target}:"
                return _pad(prompt, self.prompt_len), expr

    def score(self, prompt: str, response: str) -> float:
        m = re.fullmatch(r"\s*([\d,]+)>(\d+):", prompt)
        if m is None:
            raise ValueError(f"not a countdown prompt: {prompt!r}")
        given = sorted(int(x) for x in m.group(1).split(","))
        value = eval_expression(response)
        if value is None or sorted(int(x) for x in re.findall(r"\d+", response)) != given:
            return 0.0
        return 1.0 if value == int(m.group(2)) else float(self.partial_credit)


class SequenceConfig(BaseModel):
    """Sort or reverse a digit string whose length is drawn from min_len..max_len."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    exact_answer: ClassVar[bool] = True
    """``score`` is 1 exactly for the reference answer (:attr:`AdditionConfig.exact_answer`)."""
    kind: Literal["sort", "reverse"] = "sort"
    min_len: int = Field(2, ge=1, description="Shortest input (answer lengths vary between min_len and max_len).")
    max_len: int = Field(6, ge=1, le=64, description="Longest input.")

    @model_validator(mode="after")
    def _check(self):
        if self.min_len > self.max_len:
            raise ValueError(f"min_len={self.min_len} exceeds max_len={self.max_len}")
        return self

    @property
    def prompt_len(self) -> int:
        return self.max_len + 1

    @property
    def max_answer_len(self) -> int:
        return self.max_len

    def answer(self, s: str) -> str:
        return "".join(sorted(s)) if self.kind == "sort" else s[::-1]

    def make(self, rng: np.random.Generator) -> tuple[str, str]:
        n = int(rng.integers(self.min_len, self.max_len + 1))
        s = "".join(str(int(d)) for d in rng.integers(0, 10, n))
        return _pad(s + ">", self.prompt_len), self.answer(s)

    def score(self, prompt: str, response: str) -> float:
        m = re.fullmatch(r"\s*(\d+)>", prompt)
        if m is None:
            raise ValueError(f"not a {self.kind} prompt: {prompt!r}")
        return float(response == self.answer(m.group(1)))


ProblemConfig = Annotated[AdditionConfig | CountdownConfig | SequenceConfig, Field(discriminator="kind")]


def make_prompt_sets(
    problem, train_size: int, eval_size: int, seed: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Deterministic ``(train, held_out)`` lists of ``(prompt, reference answer)``: distinct prompts,
    the held-out set disjoint from the train set. Fewer are returned if the problem space is small."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    want = train_size + eval_size
    tries = 0
    while len(out) < want and tries < 50 * want:
        tries += 1
        p, a = problem.make(rng)
        if p not in seen:
            seen.add(p)
            out.append((p, a))
    if len(out) < 2:
        raise ValueError("the problem space is too small for a train and a held-out set")
    n_eval = min(eval_size, len(out) // 2) if len(out) < want else eval_size
    return out[: len(out) - n_eval], out[len(out) - n_eval :]
