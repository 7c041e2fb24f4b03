"""Sample storage and window math (pure)."""

from vllm_guardian.series.store import Point, SeriesKey, SeriesStore
from vllm_guardian.series import metrics

__all__ = ["Point", "SeriesKey", "SeriesStore", "metrics"]
