"""Loads the YAML configuration and validates it strictly.

Reads: one YAML file (or nothing: the built-in defaults of ``vllm_guardian.config.schema``).
Decides: whether the data is a valid ``Config``. Every problem is collected as a
``"key.path: what is wrong"`` line and all of them are raised at once in one ``ConfigError``.
Also renders the effective config for ``guardian check-config`` and names the configured
features this version accepts but does not act on yet.

The steps, one module each: ``yaml_text`` (the text to plain data: YAML 1.2 booleans, so ``nvml:
off`` means "off" and ``autodiscover: yes`` is an error instead of a silent guess; duplicate keys,
deep nesting and alias bombs refused), ``mapping`` (the data onto the dataclasses, generically,
against the ``rules``), ``cross_checks`` (what one field alone cannot say). An empty section
(``detectors:`` with everything below commented out) means its defaults.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import socket
from typing import Any, Callable

import yaml

from vllm_guardian.config.cross_checks import cross_checks
from vllm_guardian.config.mapping import Parser
from vllm_guardian.config.rules import show
from vllm_guardian.config.schema import Config
from vllm_guardian.config.yaml_text import load_yaml
from vllm_guardian.errors import ConfigError

DEFAULT_PATH = "/etc/guardian/guardian.yaml"


# Configured features this version accepts but does not act on yet: (key, what).
# Later work removes an entry when it wires the feature; nothing else lists them.
def resolve_defaults(cfg: Config, hostname: Callable[[], str] = socket.gethostname) -> Config:
    """Fills the defaults that depend on the host: ``node`` = the host name."""
    if cfg.node is None:
        return dataclasses.replace(cfg, node=hostname())
    return cfg


def parse_config(data: Any, source: str = "<config>", *, hostname: Callable[[], str] = socket.gethostname) -> Config:
    """Maps loaded YAML data onto ``Config``; raises ``ConfigError`` with every problem.

    ``None`` (an empty document) gives the defaults. ``source`` names the data in a
    problem about the document as a whole.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: expected a mapping at the top level, got {show(data)}"])
    parser = Parser()
    cfg = parser.section(Config, data, "")
    cross_checks(cfg, parser.problems)
    if parser.problems:
        raise ConfigError(parser.problems)
    return resolve_defaults(cfg, hostname)


def load_config(
    path: str | None = None, *, default_path: str = DEFAULT_PATH, hostname: Callable[[], str] = socket.gethostname
) -> Config:
    """Loads and validates a config file.

    ``path=None``: ``default_path`` when it exists, else the built-in defaults. An
    explicit path that does not exist is an error; an empty file gives the defaults.
    """
    if path is None:
        if not os.path.exists(default_path):
            return resolve_defaults(Config(), hostname)
        path = default_path
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, not a config file"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text (byte {exc.start})"]) from None
    return parse_config(load_yaml(text, path), source=path, hostname=hostname)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def config_to_dict(cfg: Config) -> dict:
    """The config as plain data (dicts, lists, scalars) for ``yaml.safe_dump`` / json."""
    return _plain(cfg)


def render_check(cfg: Config) -> str:
    """What ``guardian check-config`` prints: the effective config as YAML, every default filled in
    (every key the schema accepts is acted on: there is no accepted-but-inactive key to list)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False, allow_unicode=True)
