"""The status document's two directions, driven by the snapshot's own type hints (pure).

``plain`` turns a frozen status value into JSON-ready data (a dataclass becomes an object keyed by
its field names, a tuple a list, an ``Incident`` its ``incident_to_dict``); ``decode`` reads such
data back into the declared type, checking each value's type on the way (``StatusDocumentError``
names the path of the first wrong one). A key the document lacks takes the field's default, else
``None`` where the field may be ``None``, else the type's empty value (0, "", False, empty): a
document from an older guardian, or one without a section, still reads.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

from vllm_guardian.incidents import incident_from_dict, incident_to_dict
from vllm_guardian.model import Incident

T = TypeVar("T")


class StatusDocumentError(ValueError):
    """The status document does not have the shape of a ``StatusSnapshot``."""


def plain(value: Any) -> Any:
    """JSON-ready data of a status value (dataclasses, tuples, mappings, incidents, scalars)."""
    if isinstance(value, Incident):
        return incident_to_dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode(tp: Any, value: Any, where: str = "status") -> Any:
    """``value`` (JSON data) as an instance of the type ``tp``; raises ``StatusDocumentError``."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return value
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return decode(arg, value, where)
            except StatusDocumentError:
                continue
        raise StatusDocumentError(f"{where}: {value!r} is none of {tp}")
    if tp is Incident:
        if not isinstance(value, Mapping):
            raise StatusDocumentError(f"{where}: an incident must be an object")
        try:
            return incident_from_dict(value)
        except (KeyError, ValueError, TypeError) as e:
            raise StatusDocumentError(f"{where}: not an incident ({type(e).__name__}: {e})") from None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise StatusDocumentError(f"{where}: expected a list, got {type(value).__name__}")
        item = typing.get_args(tp)[0]  # the status holds only tuple[X, ...]
        return tuple(decode(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict) or tp is dict:
        if not isinstance(value, Mapping):
            raise StatusDocumentError(f"{where}: expected an object, got {type(value).__name__}")
        args = typing.get_args(tp) or (str, Any)
        return {str(k): decode(args[1], v, f"{where}.{k}") for k, v in value.items()}
    return _scalar(tp, value, where)


def _scalar(tp: Any, value: Any, where: str) -> Any:
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(tp)
    if ok is None:
        raise StatusDocumentError(f"{where}: the status has no reader for {tp}")
    if not ok:
        raise StatusDocumentError(f"{where}: expected {tp.__name__}, got {value!r}")
    return value


def _dataclass(cls: type[T], value: Any, where: str) -> T:
    if not isinstance(value, Mapping):
        raise StatusDocumentError(f"{where}: expected an object, got {type(value).__name__}")
    hints = _hints(cls)  # type: ignore[arg-type]  # a dataclass type is hashable
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in value:
            kwargs[f.name] = decode(hints[f.name], value[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _empty(hints[f.name], f"{where}.{f.name}")
    return cls(**kwargs)


def _empty(tp: Any, where: str) -> Any:
    """The value of a field the document lacks."""
    origin = typing.get_origin(tp)
    if (origin is Union or origin is types.UnionType) and type(None) in typing.get_args(tp):
        return None
    if origin is tuple:
        return ()
    if origin in (Mapping, dict) or tp is dict:
        return {}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, {}, where)
    if tp in (bool, int, float, str):
        return tp()
    raise StatusDocumentError(f"{where} is missing")
