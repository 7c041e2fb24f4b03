"""SeriesStore keeps each metric for its horizon: the default, or the metric's own (longer) one."""

from vllm_guardian.model import Sample
from vllm_guardian.series.store import SeriesStore


def _fill(store: SeriesStore, metric: str, until: int) -> None:
    for t in range(until + 1):
        store.add(Sample("llm", "", metric, float(t), float(t)))


def test_a_metric_with_its_own_horizon_is_kept_longer():
    store = SeriesStore(horizon=10.0, horizons={"proc.rss_bytes": 100.0})
    _fill(store, "proc.rss_bytes", 200)
    _fill(store, "proc.cpu_ratio", 200)
    assert store.window("llm", "", "proc.rss_bytes", 0)[0][0] == 100.0
    assert store.window("llm", "", "proc.cpu_ratio", 0)[0][0] == 190.0


def test_expire_honours_each_metric_horizon():
    store = SeriesStore(horizon=10.0, horizons={"proc.rss_bytes": 100.0})
    _fill(store, "proc.rss_bytes", 50)
    _fill(store, "proc.cpu_ratio", 50)
    store.expire(120.0)
    assert store.window("llm", "", "proc.rss_bytes", 0)[0][0] == 20.0
    assert store.window("llm", "", "proc.cpu_ratio", 0) == []


def test_a_shorter_own_horizon_never_cuts_below_the_default():
    store = SeriesStore(horizon=10.0, horizons={"proc.rss_bytes": 1.0})
    _fill(store, "proc.rss_bytes", 20)
    assert store.window("llm", "", "proc.rss_bytes", 0)[0][0] == 10.0


def test_a_window_is_the_points_since_oldest_first():
    store = SeriesStore(horizon=100.0)
    _fill(store, "m", 50)
    assert store.window("llm", "", "m", 47.5) == [(48.0, 48.0), (49.0, 49.0), (50.0, 50.0)]
    assert store.window("llm", "", "m", -5) == [(float(t), float(t)) for t in range(51)]
    assert store.window("llm", "", "m", 51) == [] and store.window("llm", "", "other", 0) == []


def test_subjects_follow_what_is_added_and_forgotten():
    store = SeriesStore(horizon=10.0)
    for subject in ("p1/t1", "p1/t2", "p2/t3", "p1"):
        store.add(Sample("llm", subject, "thread.cpu", 1.0, 0.0))
    store.add(Sample("other", "p9/t9", "thread.cpu", 1.0, 0.0))
    assert store.subjects("llm", "thread.cpu") == ["p1", "p1/t1", "p1/t2", "p2/t3"]
    assert store.subjects("llm", "thread.cpu", "p1/") == ["p1/t1", "p1/t2"]
    store.drop_subjects("llm", keep={"p2"})
    assert store.subjects("llm", "thread.cpu") == ["p2/t3"]
    store.expire(100.0)
    assert store.subjects("llm", "thread.cpu") == [] and store.subjects("other", "thread.cpu") == []
    store.add(Sample("other", "p9/t9", "thread.cpu", 1.0, 200.0))
    assert store.subjects("other", "thread.cpu") == ["p9/t9"]


def test_a_target_keeps_at_most_max_series_of_its_processes_threads_and_engines():
    s = SeriesStore(max_series=3)
    first = s.extend(Sample("t", f"engine:{k}", "vllm.iterations_total", 1.0, 1.0) for k in range(5))
    assert first == ["t"]  # said once, on the first sample dropped
    assert s.refused("t") == 2 and len(s.subjects("t", "vllm.iterations_total", "engine:")) == 3
    assert s.extend([Sample("t", "engine:9", "vllm.iterations_total", 1.0, 2.0)]) == []  # not said again
    assert s.add(Sample("t", "", "vllm.iterations_total", 1.0, 2.0))  # the whole target's series: always kept
    assert s.add(Sample("other", "p1", "proc.rss_bytes", 1.0, 2.0))  # the cap is per target
    s.drop_subjects("t", keep=set())  # its engines' series forgotten: room again
    assert s.add(Sample("t", "p1", "proc.rss_bytes", 1.0, 3.0)) and s.refused("t") == 3
    s.drop_target("t")
    assert s.refused("t") == 0
