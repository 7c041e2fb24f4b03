"""YAML text to plain data, strictly: YAML 1.2 booleans (only ``true``/``false``: ``off``, ``on``,
``yes``, ``no`` stay strings), duplicate keys refused, nesting deeper than ``MAX_YAML_DEPTH`` and
aliases expanding past ``MAX_YAML_NODES`` refused before PyYAML builds them; every refusal is a
``ConfigError`` naming the source and the line."""

from __future__ import annotations

import re
from typing import Any

import yaml

from vllm_guardian.config.rules import show
from vllm_guardian.errors import ConfigError

MAX_YAML_DEPTH = 32
MAX_YAML_NODES = 100_000  # nodes after expanding aliases (an anchor bomb expands to billions)
_BOOL_TAG = "tag:yaml.org,2002:bool"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _yaml12_bool_resolvers() -> dict:
    out = {
        ch: [r for r in resolvers if r[0] != _BOOL_TAG]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    pattern = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
    for ch in "tTfF":
        out.setdefault(ch, []).append((_BOOL_TAG, pattern))
    return out


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans that records duplicate keys."""

    yaml_implicit_resolvers = _yaml12_bool_resolvers()

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    self.duplicates.append(f"line {key_node.start_mark.line + 1}: duplicate key {show(key)}")
                seen.add(key)
            except TypeError:  # unhashable key: PyYAML itself reports it
                pass
        return super().construct_mapping(node, deep)


_OPENERS = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)


_CLOSERS = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def _check_depth(text: str, source: str) -> None:
    """Refuses nesting deeper than ``MAX_YAML_DEPTH`` from the token stream (the scanner does
    not recurse; PyYAML's composer does, and a deep document raises RecursionError there)."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPENERS):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise ConfigError(
                    [f"{source}: line {token.start_mark.line + 1}: YAML nested deeper than {MAX_YAML_DEPTH} levels"]
                )
        elif isinstance(token, _CLOSERS):
            depth -= 1


def _check_expansion(root: Any, source: str) -> None:
    """Refuses a document whose aliases expand to more than ``MAX_YAML_NODES`` nodes (an
    anchor bomb) or that refers to itself; counted on the node graph, each node once."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            mark = node.start_mark
            raise ConfigError([f"{source}: line {mark.line + 1}: an alias refers to itself"])
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        active.discard(key)
        sizes[key] = total
        if total > MAX_YAML_NODES:
            mark = node.start_mark
            raise ConfigError([f"{source}: line {mark.line + 1}: aliases expand to more than {MAX_YAML_NODES} values"])
        return total

    size(root)


def load_yaml(text: str, source: str = "<config>") -> Any:
    """Parses YAML text (YAML 1.2 booleans); syntax errors and duplicate keys raise
    ``ConfigError`` naming ``source`` and the line."""
    loader = None
    try:
        loader = _StrictLoader(text)  # the reader refuses control characters here already
        _check_depth(text, source)
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node, source)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError([f"{source}: YAML syntax error{where}: {what}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: YAML syntax error: {exc}"]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if loader.duplicates:
        raise ConfigError([f"{source}: {d}" for d in loader.duplicates])
    return data
