"""What every configuration section is built from: the ``Mode`` of a kind, and ``setting``, a field
with its default, its validation rule (``check``: ``vllm_guardian.config.rules``), its bounds
(``Limit``s, declared per field) and its doc. Decides nothing; read by the schema modules
(``config/schema.py``, ``config/schema_detectors.py``, ``config/schema_policy.py``) and the parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

MAX_SECONDS = 30 * 86400.0  # no duration of this product is longer than a month
MIN_INTERVAL = 0.05  # a shorter loop or probe interval only spins a core
MAX_TICK = 3600.0


@dataclass(frozen=True)
class Limit:
    """One bound of a number, beyond its type and rule: ``low`` <= value <= ``high`` (None: open),
    ``says`` the bound in words for the problem line (``expected <says>, got ...``)."""

    says: str
    low: float | None = None
    high: float | None = None

    def broken_by(self, value: float) -> bool:
        return (self.low is not None and value < self.low) or (self.high is not None and value > self.high)


SECONDS = (Limit(f"at most {MAX_SECONDS:g} seconds (30 days)", high=MAX_SECONDS),)  # a duration
INTERVAL = (Limit(f"at least {MIN_INTERVAL:g} seconds", low=MIN_INTERVAL), *SECONDS)  # a pace
TICK = (Limit(f"between {MIN_INTERVAL:g} and {MAX_TICK:g} seconds", low=MIN_INTERVAL, high=MAX_TICK),)


class Mode(str, Enum):
    """What the guardian does with an incident of one kind: record it, alert, or also remediate."""

    OBSERVE = "observe"
    ALERT = "alert"
    REMEDIATE = "remediate"

    def __str__(self) -> str:
        return self.value


def setting(default, check: str | None = None, doc: str = "", *, bound: tuple[Limit, ...] = (), many: bool = False):
    """A dataclass field with ``default`` (copied per instance when mutable, or made by a callable),
    its validation rule ``check`` (``config/rules.py``), its ``bound`` (limits judged in order, the
    first broken one is the problem) and its ``doc``. ``many``: a list field where one item alone
    stands for a list of one (``kinds: busy_loop``); ``check`` then applies to each item."""
    md: dict[str, object] = {"doc": doc}
    if check:
        md["check"] = check
    if bound:
        md["bound"] = bound
    if many:
        md["many"] = True
    if isinstance(default, (list, dict, tuple)) or callable(default):
        factory = default if callable(default) else (lambda d=default: type(d)(d))
        return field(default_factory=factory, metadata=md)
    return field(default=default, metadata=md)


def required(check: str | None = None, doc: str = "", *, many: bool = False):
    """A dataclass field without a default: the parser says ``required`` when it is left out."""
    md: dict[str, object] = {"doc": doc}
    if check:
        md["check"] = check
    if many:
        md["many"] = True
    return field(metadata=md)
