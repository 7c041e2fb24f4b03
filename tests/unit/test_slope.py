"""Robust trend math: Theil–Sen slope, bucket downsampling, Spearman rank correlation."""

from __future__ import annotations

import random

import pytest

from vllm_guardian.series.slope import Fit, downsample, pairwise_slopes, spearman, theil_sen


def fit_of(pts, **kwargs) -> Fit:
    """theil_sen's fit where the data allows one."""
    fit = theil_sen(pts, **kwargs)
    assert fit is not None
    return fit


def line(slope: float, intercept: float = 0.0, n: int = 50, t0: float = 1000.0, dt: float = 1.0):
    return [(t0 + i * dt, intercept + slope * (t0 + i * dt)) for i in range(n)]


# ------------------------------------------------------------------ Theil–Sen
@pytest.mark.parametrize(
    "slope, intercept",
    [
        (0.0, 5.0),
        (5.0, -3.0),
        (-3.0, 100.0),
        (8e6, 2e10),
        (0.001, 0.0),
    ],
    ids=["flat", "rising", "falling", "8 MB/s", "tiny"],
)
def test_theil_sen_recovers_an_exact_line(slope, intercept):
    fit = fit_of(line(slope, intercept))
    assert fit.slope == pytest.approx(slope, rel=1e-9, abs=1e-12)
    assert fit.at(1010.0) == pytest.approx(intercept + slope * 1010.0, rel=1e-9)


@pytest.mark.parametrize("share", [0.1, 0.2, 0.25])
def test_theil_sen_ignores_a_minority_of_wild_outliers(share):
    pts = line(8e6, 2e10, n=120)
    rnd = random.Random(7)
    for i in rnd.sample(range(len(pts)), int(share * len(pts))):
        pts[i] = (pts[i][0], pts[i][1] + rnd.choice([-1, 1]) * 5e10)
    assert fit_of(pts).slope == pytest.approx(8e6, rel=0.05)


def test_theil_sen_on_noisy_line_is_close_to_the_true_slope():
    rnd = random.Random(1)
    pts = [(t, v + rnd.uniform(-50e6, 50e6)) for t, v in line(8e6, 0.0, n=120)]
    assert fit_of(pts).slope == pytest.approx(8e6, rel=0.15)


def test_theil_sen_of_a_single_step_in_a_quarter_is_zero():
    pts = [(float(t), 0.0 if t < 30 else 1e9) for t in range(120)]
    assert fit_of(pts).slope == 0.0


@pytest.mark.parametrize("pts", [[], [(1.0, 2.0)], [(1.0, 2.0), (1.0, 5.0)]], ids=["empty", "one point", "one time"])
def test_theil_sen_needs_two_distinct_times(pts):
    assert theil_sen(pts) is None


def test_pairs_with_equal_times_are_skipped():
    assert pairwise_slopes([(0.0, 0.0), (0.0, 10.0), (2.0, 4.0)]) == [2.0, -3.0]


@pytest.mark.parametrize(
    "pts, share",
    [
        (line(1.0, n=10), 1.0),
        (line(-1.0, n=10), 0.0),
        (line(0.0, n=10), 0.0),
    ],
    ids=["rising", "falling", "flat"],
)
def test_rising_share_is_the_share_of_positive_pairwise_slopes(pts, share):
    assert fit_of(pts).rising_share == share


# ------------------------------------------------------------------ downsampling
def test_downsample_leaves_short_series_alone():
    pts = line(1.0, n=10)
    assert downsample(pts, 48) == pts


def test_downsample_keeps_at_most_max_points_and_the_slope():
    pts = line(3.0, 7.0, n=500)
    small = downsample(pts, 48)
    assert len(small) == 48
    assert fit_of(pts, max_points=48).slope == pytest.approx(3.0)
    assert small[0][0] >= pts[0][0] and small[-1][0] <= pts[-1][0]


def test_downsample_uses_bucket_medians():
    pts = [(0.0, 1.0), (1.0, 100.0), (2.0, 3.0), (3.0, 4.0), (4.0, 5.0), (5.0, 6.0)]
    assert downsample(pts, 2) == [(1.0, 3.0), (4.0, 5.0)]


def test_downsample_refuses_fewer_than_two_points():
    with pytest.raises(ValueError):
        downsample(line(1.0), 1)


# ------------------------------------------------------------------ Spearman
@pytest.mark.parametrize(
    "xs, ys, rho",
    [
        ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
        ([1, 2, 3, 4], [1, 4, 9, 16], 1.0),
        ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
        ([1, 2, 3, 4, 5], [2, 1, 4, 3, 5], 0.8),
        ([1, 2, 2, 3], [1, 2, 3, 4], 0.9486832980505138),
    ],
    ids=["linear", "monotonic", "reversed", "shuffled", "ties"],
)
def test_spearman_rank_correlation(xs, ys, rho):
    assert spearman(xs, ys) == pytest.approx(rho)


@pytest.mark.parametrize(
    "xs, ys",
    [([1, 2], [1, 2]), ([1, 2, 3], [5, 5, 5]), ([7, 7, 7], [1, 2, 3])],
    ids=["too few", "constant y", "constant x"],
)
def test_spearman_is_undefined_without_variation(xs, ys):
    assert spearman(xs, ys) is None


def test_spearman_refuses_unequal_lengths():
    with pytest.raises(ValueError):
        spearman([1, 2, 3], [1, 2])
