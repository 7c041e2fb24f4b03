"""What the commands share: the config they read (``-c``, else ``$GUARDIAN_CONFIG``, else the default),
the logging they set up, and the one-line failures for a daemon or a Redis that does not answer."""

from __future__ import annotations

import os

from vllm_guardian.errors import BackendUnavailable, ConfigError, GuardianError

DEFAULT_CONFIG = "/etc/guardian/guardian.yaml"
CONFIG_ENV = "GUARDIAN_CONFIG"  # the config file when -c is not given (as systemd's EnvironmentFile may set it)


def load_config(path: str | None, dry_run: bool = False):
    """The config of ``path`` (else ``$GUARDIAN_CONFIG``, else the default) with its signature catalogs
    and restart modes checked; ``dry_run`` forces ``policy.dry_run``."""
    from dataclasses import replace

    from vllm_guardian.config.loader import load_config as read_config

    if path is None and os.environ.get(CONFIG_ENV):
        path = os.environ[CONFIG_ENV]
        if not os.path.exists(path):
            raise ConfigError([f"{CONFIG_ENV}={path}: no such file (unset it, or point it at a config)"])
    cfg = read_config(path)
    from vllm_guardian.diagnosis.catalog_load import CatalogError, load_catalogs

    try:  # a bad signature catalog is a config error: named, before anything starts
        load_catalogs(cfg.diagnosis.catalogs)
    except CatalogError as e:
        raise ConfigError([f"diagnosis.catalogs: {line}" for line in str(e).splitlines()]) from None
    from vllm_guardian.remediation.methods import restart_mode_problems

    if problems := restart_mode_problems(cfg):  # a restart mode names a method of the methods table
        raise ConfigError(problems)
    if dry_run:
        cfg = replace(cfg, policy=replace(cfg.policy, dry_run=True))
    return cfg


def setup_logging(args, cfg) -> None:
    """The flags, else GUARDIAN_LOG_FORMAT / GUARDIAN_LOG_LEVEL, else the config's ``log`` section."""
    from vllm_guardian.surface.logs import FORMAT_ENV, FORMATS, LEVEL_ENV, LEVELS, choose
    from vllm_guardian.surface.logs import setup_logging as start_logging

    level_flag = "debug" if getattr(args, "verbose", False) else getattr(args, "log_level", None)
    try:
        fmt = choose(getattr(args, "log_format", None), FORMAT_ENV, cfg.log.format, FORMATS, os.environ)
        level = choose(level_flag, LEVEL_ENV, cfg.log.level, LEVELS, os.environ)
    except ValueError as e:
        raise ConfigError([str(e)]) from None
    start_logging(fmt, level)


def not_reachable(path: str, e: BaseException) -> str:
    why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return (
        f"guardian: the daemon is not reachable on {path} ({why}); is `guardian run` running with this config "
        "(systemctl status guardian)? Else pass -c with its config or --socket PATH"
    )


def redis_client(cfg, url: str | None, timeout: float | None = None):
    """(client, url) for ``--redis URL``, else the configured Redis (the embedded one's socket included)."""
    from vllm_guardian.sinks.embedded_redis import EmbeddedRedis
    from vllm_guardian.sinks.redis_client import make_client, resolve_password

    if not url:
        url = EmbeddedRedis(cfg.state_dir).url if cfg.alerts.redis_url == "embedded" else cfg.alerts.redis_url
    password = resolve_password(cfg.alerts.password_env, cfg.alerts.password_file)
    return make_client(url, password=password, timeout=timeout or cfg.alerts.timeout), url


def redis_unreachable(cfg, url: str, given: str | None, e: BaseException) -> GuardianError:
    """The one line for a Redis that does not answer: which one, why, and what to do."""
    if not isinstance(e, (OSError, BackendUnavailable)) and type(e).__module__.split(".")[0] != "redis":
        return GuardianError(f"Redis at {url}: {type(e).__name__}: {e}")
    why = str(e).removeprefix("Redis: ")
    if given is None and cfg.alerts.redis_url == "embedded":
        hint = (
            "the embedded Redis runs only while `guardian run` does (same config, same state_dir): "
            "start the guardian, or pass --redis URL"
        )
    else:
        hint = "check that it runs and the URL/password (alerts.redis_url, alerts.password_env), or pass --redis URL"
    return GuardianError(f"Redis at {url} is not reachable ({why}); {hint}")
