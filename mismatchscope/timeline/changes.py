"""Where a per-step series changes: isolated spikes, sustained shifts, drifts.

Two established methods, one per kind of change, both scale-free (so the
same parameters serve a TV of 1e-3 and a reject rate of 0.2):

* **Spikes** (one or two steps out of line, e.g. after a resume or a weight
  sync): the Iglewicz-Hoaglin modified z-score, ``M = 0.6745 (r - median r) /
  MAD(r)``, flagged when ``|M| > 3.5`` (Iglewicz & Hoaglin 1993, "How to Detect
  and Handle Outliers", the threshold they recommend). It is applied to
  residuals, not to the raw values, and twice: ``r_before`` from the median of
  the 3 steps before each step and ``r_after`` from the median of the 3 steps
  after it (the series mirrored at its ends). A step is a spike when both
  scores exceed 3.5 with the same sign: out of line with what came before
  *and* with what comes after. A level shift is in line with one side, so it
  is not mistaken for a run of outliers; a burst of up to two steps still
  stands out. When more than half the residuals are equal (MAD = 0) the
  score is undefined and the spike test is skipped for that series, with a
  note. On Gaussian noise the test flags about 1.5 false spikes per 100
  series of 60 steps.
* **Shifts** (a sustained change of level): binary segmentation with the
  least-squares cost for a change in mean (``ruptures.Binseg``, model
  ``"l2"``, segments of at least 2 steps), on the series with its spikes
  replaced by their neighbour median. The penalty is ``3 sigma^2 ln n``: the
  MBIC penalty for a change in mean of the R ``changepoint`` package (Zhang &
  Siegmund 2007; Killick & Eckley 2014), in the units of the l2 cost; sigma is
  the noise scale, estimated robustly as the normal-consistent MAD of the
  first differences over sqrt 2 (a shift moves one difference, so it does not
  inflate the estimate; when that MAD is 0, e.g. a rate at exactly 0 for most
  steps, the mean absolute deviation stands in: sigma = 1.2533 MeanAD / sqrt 2).
  On Gaussian noise this flags a false shift in about 4% of 60-step series
  and well under 1% of 300-step ones.
* **Scale**: both tests assume noise of one size along the series, but the
  noise of these metrics grows with their level. Means and quantiles are
  tested on ``log x``, shares and reject rates on ``arcsin sqrt x`` (the
  variance-stabilising transform of a proportion); values are reported in
  their own units.
* **Rare events**: a share or rate built from a handful of tokens per step is
  a count, not a roughly normal value; both tests would read single tokens as
  spikes. Such a series is tested only when it counts at least 5 tokens per
  step on average (the n p >= 5 rule for the normal approximation of a
  binomial); the other metrics of the same steps still are.
* **Drifts**: a gradual creep has no single change point; the segmentation
  fits it with a staircase. Two or more consecutive shifts in the same
  direction are reported as one drift, from the first to the last.
* **A size that matters**: both tests are scale-free, so a series that barely
  moves (a zero-mismatch run's k3 at 1e-13) would flag a 1e-6 wiggle. Where a
  step's value has a standard error from its own tokens (the means, the
  shares), a spike must differ from its baseline, and a shift's two levels from
  each other, by :attr:`ChangeConfig.min_size_se` of those errors. A spike
  below its neighbours is called a dip.

``ruptures`` (which brings scipy) is imported only here, when a timeline is
analysed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import MissingDependencyError
from .json_document import DriftMethod, Methods, ShiftMethod, SpikeMethod

MAD_TO_Z = 0.6745
"""Phi^-1(0.75): the MAD of a standard normal; Iglewicz-Hoaglin's constant."""
MEANAD_TO_SD = 1.253314
"""sqrt(pi / 2): the ratio of SD to mean absolute deviation for a normal."""


@dataclass(frozen=True)
class ChangeConfig:
    spike_neighbours: int = 3
    """steps on each side whose median is a baseline of a step (bursts up to this - 1 steps long stand out)."""
    spike_threshold: float = 3.5
    """flag a step when |modified z| of its residuals exceeds this (Iglewicz-Hoaglin)."""
    shift_penalty: float = 3.0
    """Binseg penalty = shift_penalty * sigma^2 * ln(n) (3: MBIC)."""
    shift_min_size: int = 2
    """shortest segment between two shifts, in steps."""
    min_steps: int = 8
    """series shorter than this are not tested."""
    min_mean_count: float = 5.0
    """shares and rates are tested only with at least this many counted tokens per step on average (n p >= 5)."""
    min_size_se: float = 3.0
    """a change must be at least this many standard errors of the steps' own values (where they have one)."""


SCALES = {
    "linear": "the values as they are",
    "log": "log x: for means and quantiles of |p - q|, k3, |l|, whose noise grows with their level "
    "(falls back to linear when a value is <= 0)",
    "asin-sqrt": "arcsin(sqrt x): the variance-stabilising transform of a binomial proportion, for token shares and "
    "reject rates (0 is fine)",
}


def methods(cfg: ChangeConfig) -> Methods:
    """Names, parameters and references of the methods, for the output."""
    h = cfg.spike_neighbours
    return Methods(
        spike=SpikeMethod(
            method="Iglewicz-Hoaglin modified z-score of the residuals from the preceding and the following steps",
            statistic=f"M = {MAD_TO_Z} (r - median r) / MAD(r), for r = x - median of the {h} steps before and for "
            f"r = x - median of the {h} steps after; a spike when both |M| > threshold with one sign; "
            "not tested when MAD = 0",
            threshold=cfg.spike_threshold,
            neighbours=h,
            min_size_se=cfg.min_size_se,
            reference="Iglewicz & Hoaglin (1993), How to Detect and Handle Outliers",
        ),
        shift=ShiftMethod(
            method="binary segmentation, change in mean (ruptures.Binseg, model l2)",
            penalty=f"{cfg.shift_penalty:g} * sigma^2 * ln(n), sigma = 1.4826 MAD(first differences) / sqrt(2)",
            penalty_factor=cfg.shift_penalty,
            min_size=cfg.shift_min_size,
            applied_to="the series with each spike replaced by the median of its neighbours on both sides",
            reference="ruptures (Truong, Oudre & Vayatis 2020); MBIC penalty of R changepoint (Zhang & Siegmund 2007)",
        ),
        drift=DriftMethod(method="two or more consecutive shifts in the same direction"),
        scales=dict(SCALES),
        min_steps=cfg.min_steps,
        min_mean_count=cfg.min_mean_count,
    )


@dataclass
class SeriesChanges:
    spikes: list[dict] = field(default_factory=list)
    """{"kind" (spike, or dip below the neighbours), "step", "value", "baseline" (median of the neighbours), "score"
    (the smaller modified z)} per flagged step."""
    shifts: list[dict] = field(default_factory=list)
    """{"step" (first step of the new level), "before", "after" (segment means), "size_sd" (on the test scale)}."""
    drifts: list[dict] = field(default_factory=list)
    """{"from_step", "to_step", "before", "after", "shifts"}."""
    scale: str = "linear"
    """the scale the tests ran on (see ``SCALES``)."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(test, reason) for each test not run: test is "spike", "shift" or "all"."""


def to_scale(x: np.ndarray, scale: str) -> tuple[np.ndarray, str]:
    """The series on the test scale, and the scale actually used."""
    if scale == "log":
        return (np.log(x), "log") if (x > 0).all() else (x, "linear")
    if scale == "asin-sqrt":
        return np.arcsin(np.sqrt(np.clip(x, 0.0, 1.0))), "asin-sqrt"
    return x, "linear"


def detect(
    step_N: np.ndarray,
    value_N: np.ndarray,
    cfg: ChangeConfig = ChangeConfig(),
    scale: str = "linear",
    count_N: np.ndarray | None = None,
    error_N: np.ndarray | None = None,
) -> SeriesChanges:
    """Spikes, dips, shifts and drifts of one series (steps ascending). Non-finite values are left out.

    The tests run on ``scale`` (see ``SCALES``); values, baselines and
    segment means are reported in the metric's own units. ``count_N``: for a
    share or rate, the tokens it counts at each step (the rare-event rule).
    ``error_N``: each step's standard error from its own tokens; a change
    smaller than ``cfg.min_size_se`` of them is not one.
    """
    ok = np.isfinite(value_N)
    steps, x = np.asarray(step_N)[ok], np.asarray(value_N, dtype=np.float64)[ok]
    err = None if error_N is None else np.nan_to_num(np.asarray(error_N, dtype=np.float64)[ok])
    n = x.size
    if n < max(cfg.min_steps, 2 * cfg.spike_neighbours + 1):
        return SeriesChanges(skipped=[("all", f"{n} step(s) with a value; the tests need {cfg.min_steps}")])
    if count_N is not None and np.asarray(count_N)[ok].mean() < cfg.min_mean_count:
        return SeriesChanges(
            skipped=[
                (
                    "all",
                    f"fewer than {cfg.min_mean_count:g} counted tokens per step on average: "
                    "too few for tests that assume normal noise",
                )
            ]
        )
    if np.all(x == x[0]):
        return SeriesChanges(skipped=[("all", "constant series")])
    y, used = to_scale(x, scale)
    out = SeriesChanges(scale=used)
    spike_idx, around = _spikes(steps, x, y, cfg, out, err)
    y_clean, x_clean = y.copy(), x.copy()
    y_clean[spike_idx] = around[spike_idx]
    x_clean[spike_idx] = neighbour_medians(x, cfg.spike_neighbours)[2][spike_idx]
    out.shifts = _shifts(steps, x_clean, y_clean, cfg, err)
    out.drifts = drifts(out.shifts)
    return out


def _shifts(
    steps: np.ndarray, x_clean: np.ndarray, y_clean: np.ndarray, cfg: ChangeConfig, err: np.ndarray | None
) -> list[dict]:
    """The change points of the despiked series (test scale ``y_clean``), reported in the metric's units."""
    sigma = noise_sigma(y_clean)
    if not sigma > 0:  # no noise to scale a shift by (NaN included)
        return []
    n = y_clean.size
    bkps = _binseg(y_clean, cfg.shift_penalty * sigma * sigma * math.log(n), cfg.shift_min_size)
    edges = [0, *bkps, n]
    out = []
    for a, b, c in zip(edges, edges[1:], edges[2:], strict=False):  # each segment with its neighbours
        before, after = float(x_clean[a:b].mean()), float(x_clean[b:c].mean())
        if err is not None:  # the two levels' own standard errors: a shift smaller than they allow is none
            se = math.sqrt(float(np.mean(err[a:b] ** 2)) / (b - a) + float(np.mean(err[b:c] ** 2)) / (c - b))
            if abs(after - before) < cfg.min_size_se * se:
                continue
        out.append(
            {
                "step": int(steps[b]),
                "before": before,
                "after": after,
                "size_sd": float(y_clean[b:c].mean() - y_clean[a:b].mean()) / sigma,
            }
        )
    return out


def _spikes(
    steps: np.ndarray, x: np.ndarray, y: np.ndarray, cfg: ChangeConfig, out: SeriesChanges, err: np.ndarray | None
):
    """Fill ``out.spikes`` (spikes and dips); return their indices and the neighbour median of every step (test
    scale)."""
    before, after, around = neighbour_medians(y, cfg.spike_neighbours)
    z_before, z_after = modified_z(y - before), modified_z(y - after)
    if z_before is None or z_after is None:
        out.skipped.append(("spike", "more than half the steps equal their neighbours' median (MAD = 0)"))
        return np.zeros(0, np.int64), around
    score = np.where(np.abs(z_before) < np.abs(z_after), z_before, z_after)
    flagged = (np.abs(score) > cfg.spike_threshold) & (np.sign(z_before) == np.sign(z_after))
    baseline_x = neighbour_medians(x, cfg.spike_neighbours)[2]
    if err is not None:  # out of line with the neighbours, and by more than its own tokens' noise allows
        flagged &= np.abs(x - baseline_x) >= cfg.min_size_se * err
    idx = np.flatnonzero(flagged)
    out.spikes = [
        {
            "kind": "spike" if x[i] >= baseline_x[i] else "dip",
            "step": int(steps[i]),
            "value": float(x[i]),
            "baseline": float(baseline_x[i]),
            "score": float(score[i]),
        }
        for i in idx
    ]
    return idx, around


def neighbour_medians(x: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Medians of the h steps before, the h steps after, and all 2h neighbours of each step.

    The series is mirrored at its ends, so the first step is compared with
    the steps after it on both counts (and the last with those before it).
    """
    from numpy.lib.stride_tricks import sliding_window_view

    window = sliding_window_view(np.pad(x, h, mode="reflect"), 2 * h + 1)
    return (
        np.median(window[:, :h], axis=1),
        np.median(window[:, h + 1 :], axis=1),
        np.median(np.delete(window, h, axis=1), axis=1),
    )


def modified_z(r: np.ndarray) -> np.ndarray | None:
    """Iglewicz-Hoaglin modified z-score ``0.6745 (r - median r) / MAD``; None when MAD = 0."""
    dev = r - np.median(r)
    mad = np.median(np.abs(dev))
    return MAD_TO_Z * dev / mad if mad > 0 else None


def noise_sigma(x: np.ndarray) -> float:
    """Robust noise SD from first differences: 1.4826 MAD(diff) / sqrt 2 (MeanAD fallback when MAD = 0)."""
    d = np.diff(x)
    dev = np.abs(d - np.median(d))
    mad = float(np.median(dev))
    if mad > 0:
        return mad / MAD_TO_Z / math.sqrt(2)
    return float(MEANAD_TO_SD * dev.mean() / math.sqrt(2))


def drifts(shifts: list[dict]) -> list[dict]:
    """Runs of >= 2 consecutive shifts in one direction, as one drift each."""
    out: list[dict] = []
    run: list[dict] = []
    for s in [*shifts, None]:
        if s is not None and run and (s["size_sd"] > 0) == (run[-1]["size_sd"] > 0):
            run.append(s)
            continue
        if len(run) >= 2:
            out.append(
                {
                    "from_step": run[0]["step"],
                    "to_step": run[-1]["step"],
                    "before": run[0]["before"],
                    "after": run[-1]["after"],
                    "shifts": len(run),
                }
            )
        run = [s] if s is not None else []
    return out


def _binseg(x: np.ndarray, pen: float, min_size: int) -> list[int]:
    try:
        import ruptures as rpt
    except ImportError:
        raise MissingDependencyError(
            "timeline's change detection needs the ruptures package", hint="pip install ruptures"
        ) from None
    return rpt.Binseg(model="l2", min_size=min_size, jump=1).fit(x.reshape(-1, 1)).predict(pen=pen)[:-1]
