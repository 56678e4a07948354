"""The explorer's words: the introduction, each panel's explanation (with its sources), and the
guided tours (the five teaching demos of ``sandbox demo`` as lists of settings to try)."""

from __future__ import annotations

INTRO = (
    "In asynchronous RL the rollout workers keep generating while the learner trains, so each update uses "
    "responses sampled by an older policy. Move the controls: every combination below was simulated "
    "beforehand, and the panels switch between those runs instantly. The dashed black line is always the "
    "synchronous run with the same learning rate, delay tail and engine: every step waits for the whole batch, "
    "no staleness, no correction."
)

# panel -> (title, explanation; HTML, sources cited in the text)
PANELS: dict[str, tuple[str, str]] = {
    "reward_time": (
        "expected reward vs simulated time",
        "What asynchrony buys: the synchronous learner waits for the slowest response of each batch, so with a "
        "long-tailed delay its clock runs far ahead of the asynchronous one for the same number of updates "
        "(the expected maximum of P times against their mean; docs/theory.md T6). AReaL (Fu et al., arXiv "
        "2505.24298) bounds the lag with the same admission rule as the <code>max_lag</code> control here.",
    ),
    "reward_step": (
        "expected reward vs learner step",
        "What asynchrony costs: per update, stale responses carry less information about the current policy, so "
        "the asynchronous curve usually matches or trails the synchronous one. A large learning rate with a large "
        "lag is where it trails or breaks: the update keeps pushing in a direction that was right k versions ago.",
    ),
    "hist": (
        "staleness histogram",
        "How many policy versions behind the learner each consumed group was. The bound k_max caps it (dashed "
        "line); the delay tail shapes it: with heavy tails a few slow responses arrive late and old, which is "
        "exactly what the bound throttles (AReaL, arXiv 2505.24298).",
    ),
    "ess": (
        "ESS / N",
        "Kish's effective sample size of the sequence-level importance weights π/μ, as a fraction of the batch "
        "(Kish 1965): 1 when the data is on-policy, near 1/N when one response dominates. It falls with the lag "
        "and with the engine's mismatch (sampler and trainer disagree even at the same weights; Yao et al. 2025). "
        "VCPO (arXiv 2602.17616) scales the learning rate by √(ESS/N). With the engine mismatch on, the orange dotted line is theory T12's "
        "prediction of the mismatch alone at the initial policy.",
    ),
    "cos": (
        "cosine of consecutive gradients",
        "GAC (arXiv 2603.01501) observes that stale updates are computed on data from nearly the same old policy, "
        "so consecutive gradients tend to point the same way, and projects out the aligned part. Check it here "
        "rather than take it on trust: on the bit-string task early learning pushes every bit towards 1, so even "
        "the synchronous cosine is positive, and the lag's effect depends on the learning rate. A step whose "
        "gradient is zero (all rewards of every group equal, e.g. once every bit is learnt) has no cosine: it is "
        "a gap, not a zero.",
    ),
    "timeline": (
        "worker and learner timeline (asynchronous)",
        "From the run's event log: each bar is one group being generated on a worker (the colour alternates "
        "with the policy version it was sampled with); the top row is the learner. Asynchronous workers start "
        "their next group at once and keep busy until the lag bound holds them back.",
    ),
    "timeline_sync": (
        "worker and learner timeline (synchronous)",
        "The synchronous reference over the same window: each step dispatches one batch, waits for its slowest "
        "group (the idle stretches after the short ones), then trains while every worker waits. That idle time "
        "is what asynchrony takes back (<code>sandbox demo stragglers</code>).",
    ),
    "theory": (
        "delayed SGD: the critical step",
        "For gradient descent on a quadratic with a gradient k steps old, x<sub>t+1</sub> = x<sub>t</sub> − "
        "lr·λ·x<sub>t−k</sub> converges only while lr·λ &lt; 2 sin(π/(4k+2)) (Levin &amp; May 1976; docs/theory.md "
        "T1): the safe step shrinks roughly like π/(2k). The bit-string runs use Adam on a non-quadratic loss, so "
        "this is the mechanism, not a prediction of their threshold.",
    ),
}

#: What a tour step does not set: every step sets every control, so a step reads the same whatever
#: was selected before (the texts were checked against the default grid's runs).
TOUR_DEFAULTS = {"tail": "exponential", "lag": 16, "lr": 0.3, "method": "none", "engine": False, "all": False}

# tour -> (intro, [(text, settings)]); settings move the controls (nearest available value)
TOURS: dict[str, tuple[str, list[tuple[str, dict]]]] = {
    "Stragglers": (
        "Synchronous training waits for the slowest group of every batch (<code>sandbox demo stragglers</code>).",
        [
            ("Exponential delays, smallest lag bound: compare the two reward-vs-time curves, then the timeline: "
             "the synchronous learner's clock runs several times longer for the same number of steps.",
             {"tail": "exponential", "lag": 0, "method": "none", "engine": False, "all": False}),
            ("Switch to the heavy tail: the synchronous run waits longer still (the numbers table), the "
             "asynchronous one is not held up by the rare slow response.",
             {"tail": "heavy", "lag": 0, "method": "none", "engine": False, "all": False}),
            ("Raise the lag bound: workers idle less (timeline), the histogram spreads to older versions.",
             {"tail": "heavy", "lag": 16, "method": "none", "engine": False, "all": False}),
        ],
    ),
    "Delayed instability": (
        "A stale gradient with a large step keeps pushing where the policy was (<code>sandbox demo delayed_instability</code>).",
        [
            ("Small learning rate, moderate lag: reward per step follows the synchronous run.",
             {"lr": 0.0, "lag": 4, "method": "none", "engine": False, "all": False}),
            ("Largest learning rate and lag: reward per step now trails the synchronous run by many steps; "
             "the critical-step panel shows why the tolerable step shrinks with the delay.",
             {"lr": 10.0, "lag": 16, "method": "none", "engine": False, "all": False}),
        ],
    ),
    "ESS collapse": (
        "Importance weights of old or mismatched data concentrate on a few responses (<code>sandbox demo ess_collapse</code>).",
        [
            ("Exact engine, smallest lag: ESS/N stays near 1.", {"lag": 0, "engine": False, "method": "none", "all": False}),
            ("Largest lag: ESS/N drops as the learner's policy moves away from the one that sampled.",
             {"lag": 16, "engine": False, "method": "none", "all": False}),
            ("Turn on the engine mismatch: even the synchronous run's ESS drops; its first steps sit near the "
             "T12 line, and it recovers as the bits become nearly certain.",
             {"lag": 16, "engine": True, "method": "none", "all": False}),
        ],
    ),
    "Stale alignment": (
        "Consecutive stale gradients point the same way (<code>sandbox demo stale_alignment</code>).",
        [
            ("Largest learning rate, heavy tail, smallest lag: the cosine hovers around zero, below the synchronous one.",
             {"tail": "heavy", "lr": 10.0, "lag": 0, "method": "none", "all": False}),
            ("Largest lag: the cosine rises well above zero and above the synchronous curve.",
             {"tail": "heavy", "lr": 10.0, "lag": 16, "method": "none", "all": False}),
            ("The same run with GAC: it projects the aligned part out of each update; the raw gradients drawn "
             "here stay aligned (GAC acts on the update, not on what it measures), compare the reward per step.",
             {"tail": "heavy", "lr": 10.0, "lag": 16, "method": "gac", "all": False}),
        ],
    ),
    "Stabilizers": (
        "TIS, M2PO, GAC and VCPO act on different parts of the update (<code>sandbox demo stabilizers</code>).",
        [
            ("All methods at the largest lag and learning rate, overlaid: which reaches a high reward in the fewest steps?",
             {"lag": 16, "lr": 10.0, "method": "none", "engine": False, "all": True}),
            ("VCPO: the step shrinks with √(ESS/N), so at low ESS its reward per step rises more slowly than TIS alone.",
             {"lag": 16, "lr": 10.0, "method": "vcpo", "engine": False, "all": False}),
            ("M2PO with the engine mismatch on: it masks the most off-policy tokens instead of reweighting them.",
             {"lag": 16, "lr": 10.0, "method": "m2po", "engine": True, "all": False}),
        ],
    ),
}
