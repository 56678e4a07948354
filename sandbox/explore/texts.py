"""The explorer's words: the introduction, each panel's explanation (with its sources), and the
guided tours (ordered stories: each step moves the controls and names the chart to scroll to and outline)."""

from __future__ import annotations

INTRO = (
    "Staleness has a price only where a step can overshoot. The page opens on the delayed noisy quadratic "
    "(theory T1): pick the lag bound and learning rate and watch the loss; then switch the task to the "
    "bit-string, where every stale gradient still points the right way. "
    "In asynchronous RL the rollout workers keep generating while the learner trains, so each update uses "
    "responses sampled by an older policy. Move the controls: every combination below was simulated "
    "beforehand, and the panels switch between those runs instantly. The dashed black line is always the "
    "synchronous run with the same learning rate, delay tail and engine: every step waits for the whole batch, "
    "spread over all workers (work-conserving), no staleness, no correction. Thin lines are the single replicas."
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
    "phase": (
        "phase map: lag bound × learning rate",
        "Each cell is a precomputed run of the selected method: its time to the target against the synchronous "
        "reference at the same learning rate (mean over the replicas where both reach it), and how many replicas "
        "collapsed. The column label gives the realised mean lag under its bound. On the quadratic the dashed "
        "line is T1's critical step for a fixed delay equal to that mean lag (docs/theory.md T1). It is a guide, "
        "not a sharp edge: these delays vary from group to group, and a run somewhat above the line (lr 0.6 at "
        "k_max 16) still converges, while far above it (lr 1) every replica diverges. Click a cell to select its run.",
    ),
    "timeline": (
        "worker and learner timeline (asynchronous)",
        "From the run's event log: each bar is one group being generated on a worker, coloured by the lag it "
        "is consumed at (grey: not consumed within the run, or not yet during a replay); × marks a group the "
        "lag bound dropped; the top row is the learner. Asynchronous workers start their next group at once and "
        "keep busy until the lag bound holds them back. Play the event log to watch the histogram fill; hover "
        "a histogram bar to outline its groups here.",
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
        "T1): the safe step shrinks roughly like π/(2k). The marker sits at the run's realised mean lag, not at the "
        "bound k_max (dashed). On the quadratic (λ_max = 1) the open circle is the run's own step; the bit-string "
        "runs use Adam on a non-quadratic loss, so there it is the mechanism, not a prediction of their threshold.",
    ),
}

#: What a tour step does not set: every step sets every control, so a step reads the same whatever
#: was selected before (the texts were checked against the default grid's runs).
TOUR_DEFAULTS = {
    "task": "bitstring",
    "tail": "exponential",
    "lag": 16,
    "lr": 0.3,
    "method": "none",
    "engine": False,
    "all": False,
}

Q = {"task": "quadratic", "tail": "exponential", "engine": False, "all": False}

# tour -> (intro, [(button, text, settings, chart to scroll to)]); settings move the controls (nearest value)
TOURS: dict[str, tuple[str, list[tuple[str, str, dict, str]]]] = {
    "Staleness bites: the delayed quadratic": (
        "SGD on a quadratic with a finite minimum: a step computed from an old point overshoots (docs/theory.md T1).",
        [
            (
                "Show lag bound 2, lr 1",
                "With a small lag the asynchronous loss falls about as fast per step as the "
                "synchronous one; the headline gives its time to the target against the work-conserving synchronous "
                "reference, replica by replica (with exponential delays they are close; switch the tail to heavy).",
                {**Q, "lag": 2, "lr": 1.0, "method": "none"},
                "c-reward-time",
            ),
            (
                "Raise the lag bound to 16",
                "Same learning rate, larger lag: the loss climbs by orders of magnitude and "
                "every replica (thin lines) diverges; the headline counts them as collapsed.",
                {**Q, "lag": 16, "lr": 1.0, "method": "none"},
                "c-reward-time",
            ),
            (
                "Show why (T1 at the mean lag)",
                "The critical step at the run's realised mean lag is far below this "
                "run's lr·λ_max = 1: the open circle sits above the curve.",
                {**Q, "lag": 16, "lr": 1.0, "method": "none"},
                "c-theory",
            ),
            (
                "Apply the staleness-aware LR",
                "Dividing each step by its lag (Zhang et al. 2016) brings the step "
                "under the curve: the same lag now converges on every replica; the headline compares its time to the "
                "target with the synchronous reference's.",
                {**Q, "lag": 16, "lr": 1.0, "method": "staleness_lr"},
                "c-reward-time",
            ),
            (
                "Try GAC on the same run",
                "GAC projects out the part of the gradient aligned with the previous one; "
                "compare its loss and its replicas with the staleness-aware LR.",
                {**Q, "lag": 16, "lr": 1.0, "method": "gac"},
                "c-reward-time",
            ),
            (
                "Use a smaller step instead",
                "lr 0.3 at the same lag: stable without any correction, slower per step.",
                {**Q, "lag": 16, "lr": 0.3, "method": "none"},
                "c-reward-step",
            ),
        ],
    ),
    "Stragglers": (
        "Synchronous training waits for the slowest group of every batch (<code>sandbox demo stragglers</code>).",
        [
            (
                "Show the smallest lag bound",
                "Exponential delays: compare the two reward-vs-time curves, then the "
                "timeline: the synchronous learner's clock runs longer for the same number of steps.",
                {"tail": "exponential", "lag": 0, "method": "none", "engine": False, "all": False},
                "c-timeline-sync",
            ),
            (
                "Switch to the heavy tail",
                "The synchronous run waits longer still (the numbers table), the "
                "asynchronous one is not held up by the rare slow response.",
                {"tail": "heavy", "lag": 0, "method": "none", "engine": False, "all": False},
                "c-reward-time",
            ),
            (
                "Raise the lag bound",
                "Workers idle less (timeline), the histogram spreads to older versions.",
                {"tail": "heavy", "lag": 16, "method": "none", "engine": False, "all": False},
                "c-hist",
            ),
        ],
    ),
    "Nothing to lose: the bit-string": (
        "On the bit-string every gradient pushes every bit towards 1, so an old gradient still points the right way.",
        [
            (
                "Show a small learning rate",
                "Small learning rate, moderate lag: reward per step follows the synchronous run.",
                {"lr": 0.0, "lag": 4, "method": "none", "engine": False, "all": False},
                "c-reward-step",
            ),
            (
                "Show the largest lr and lag",
                "Largest learning rate and lag: reward per step trails the synchronous run "
                "a little, but nothing diverges; T1's curve is the mechanism, not this task's threshold.",
                {"lr": 10.0, "lag": 16, "method": "none", "engine": False, "all": False},
                "c-reward-step",
            ),
        ],
    ),
    "ESS collapse": (
        "Importance weights of old or mismatched data concentrate on a few responses (<code>sandbox demo ess_collapse</code>).",
        [
            (
                "Show ESS at the smallest lag",
                "Exact engine, smallest lag: ESS/N stays near 1.",
                {"lag": 0, "engine": False, "method": "none", "all": False},
                "c-ess",
            ),
            (
                "Show ESS at the largest lag",
                "ESS/N drops as the learner's policy moves away from the one that sampled.",
                {"lag": 16, "engine": False, "method": "none", "all": False},
                "c-ess",
            ),
            (
                "Turn on the engine mismatch",
                "Even the synchronous run's ESS drops; its first steps sit near the "
                "T12 line, and it recovers as the bits become nearly certain.",
                {"lag": 16, "engine": True, "method": "none", "all": False},
                "c-ess",
            ),
        ],
    ),
    "Stale alignment": (
        "Consecutive stale gradients point the same way (<code>sandbox demo stale_alignment</code>).",
        [
            (
                "Show the cosine at lag 0",
                "Largest learning rate, heavy tail, smallest lag: the cosine hovers around zero.",
                {"tail": "heavy", "lr": 10.0, "lag": 0, "method": "none", "all": False},
                "c-cos",
            ),
            (
                "Show the cosine at lag 16",
                "Largest lag: compare the cosine with the synchronous curve.",
                {"tail": "heavy", "lr": 10.0, "lag": 16, "method": "none", "all": False},
                "c-cos",
            ),
            (
                "Apply GAC",
                "GAC projects the aligned part out of each update; the raw gradients drawn here stay "
                "aligned (GAC acts on the update, not on what it measures); compare the reward per step.",
                {"tail": "heavy", "lr": 10.0, "lag": 16, "method": "gac", "all": False},
                "c-reward-step",
            ),
        ],
    ),
    "Stabilizers": (
        "TIS, M2PO, GAC and VCPO act on different parts of the update (<code>sandbox demo stabilizers</code>).",
        [
            (
                "Overlay every method",
                "All methods at the largest lag and learning rate: which reaches a high reward in the fewest steps?",
                {"lag": 16, "lr": 10.0, "method": "none", "engine": False, "all": True},
                "c-reward-step",
            ),
            (
                "Show VCPO",
                "The step shrinks with √(ESS/N): the LR scale it applied is in the numbers table.",
                {"lag": 16, "lr": 10.0, "method": "vcpo", "engine": False, "all": False},
                "c-reward-step",
            ),
            (
                "Show M2PO with engine mismatch",
                "It masks the most off-policy tokens instead of reweighting them: the "
                "masked fraction is in the numbers table.",
                {"lag": 16, "lr": 10.0, "method": "m2po", "engine": True, "all": False},
                "c-reward-step",
            ),
        ],
    ),
}
