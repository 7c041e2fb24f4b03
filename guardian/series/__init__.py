"""Sample storage and window math (pure)."""

from .store import Point, SeriesKey, SeriesStore
from . import metrics

__all__ = ["Point", "SeriesKey", "SeriesStore", "metrics"]
