"""API keys of the supervised servers: where each one comes from, and the HTTP client that sends it.

A vLLM server started with ``--api-key K`` (or ``VLLM_API_KEY=K`` in its environment) answers
401 to every ``/v1/*`` request without ``Authorization: Bearer K``; ``/health`` and ``/metrics``
stay open. The guardian's canary and model lookup are ``/v1/*`` requests, so without the key a
hung engine looks like a fast "not a hang" failure.

Reads, per target, in this order:
- the target's config: ``api_key_env`` (a variable of the *guardian's* environment) or
  ``api_key_file`` (a file, first line of its first ``KEY_FILE_MAX`` bytes; surrounding whitespace
  dropped), opened as ``host.server_files`` opens a file on a server's behalf — the key is sent
  to the server, so a symbolic link its user could change must never make root read another
  file into the header (a Kubernetes Secret's own links are root's, and followed);
- otherwise the server's own command line (``--api-key K`` / ``--api-key=K``; vLLM accepts
  several keys, any one works, the first is taken) and then ``VLLM_API_KEY`` in
  ``/proc/<pid>/environ`` (through ``ProcFS``; readable as the server's user), the same
  precedence vLLM applies.

Decides: which key (if any) goes with requests to which server (by its ``scheme://host:port``).
The key of an address belongs to the process that owns its listening socket: when two targets
share one (a process whose argv names another server's port), the one discovery found holding
the socket wins, then a configured one, then the first; never simply the last seen.
The key is held only in memory, sent only in the ``Authorization`` header of ``/v1/*``
requests, and never formatted into a message: problems name the *source* (``env GUARDIAN_KEY``,
``file /etc/…``, ``--api-key of pid 42``), never the value.

Every key, whatever its source, is stripped of surrounding whitespace (a Kubernetes Secret made
from a file ends in a newline, and so does ``VLLM_API_KEY`` set from one); a key that still holds
a control character is refused (an HTTP header cannot carry it) with a problem naming its source.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian.host.http import HttpClient, HttpResponse
from vllm_guardian.host.server_files import Opener, open_read, read_head

GUARDED_PREFIX = "/v1"  # vLLM's AuthenticationMiddleware guards paths under /v1 only
ENV_NAME = "VLLM_API_KEY"
AUTH_STATUSES = (401, 403)
KEY_FILE_MAX = 4096  # bytes of an api_key_file read (a key is a line)


@dataclass(frozen=True)
class KeySource:
    """A key and where it came from (``origin`` is safe to print; ``key`` never is)."""

    key: str | None
    origin: str  # "config env NAME" | "config file PATH" | "--api-key of pid N" | "VLLM_API_KEY of pid N" | "none"
    problem: str = ""  # set when the configured source could not be read

    def __repr__(self) -> str:  # a dataclass repr would print the key
        return f"KeySource(origin={self.origin!r}, key={'<set>' if self.key else None}, problem={self.problem!r})"


NO_KEY = KeySource(None, "none")


# ---------------------------------------------------------------- pure
def key_from_argv(argv: Iterable[str]) -> str | None:
    """The first key given to ``--api-key`` (``--api-key K [K2 …]`` or ``--api-key=K``); the last
    ``--api-key`` option wins, as argparse does."""
    args = list(argv)
    found: str | None = None
    for i, arg in enumerate(args):
        if arg == "--api-key":
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                found = args[i + 1]
        elif arg.startswith("--api-key="):
            found = arg[len("--api-key=") :]
    return found or None


def clean_key(value: str | None, origin: str, what: str = "key") -> KeySource:
    """A read secret (an API key; a Kubernetes token, ``what="token"``) made usable: whitespace
    around it dropped; None (with the problem) when it is empty or holds a control character (an
    HTTP header cannot carry it). The message names ``origin``, never the value."""
    value = (value or "").strip()
    if not value:
        return KeySource(None, origin)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return KeySource(
            None, origin, f"the {what} from {origin} holds a control character (not shown): not used; fix the {what}"
        )
    return KeySource(value, origin)


def origin_of(url: str) -> str:
    """``scheme://host:port`` of a URL (the default port filled in): the key's address."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def needs_key(url: str) -> bool:
    path = urlsplit(url).path
    return path == GUARDED_PREFIX or path.startswith(GUARDED_PREFIX + "/")


def describe_auth_failure(status: int, path: str, source: KeySource) -> str:
    """The status line for a 401/403: what was refused and what to do, never the key."""
    if source.key is None:
        hint = (
            "no API key found: the server requires one; set the target's api_key_env or "
            "api_key_file (or run the guardian as the server's user so it can read --api-key / "
            f"{ENV_NAME} from /proc)"
        )
        if source.problem:
            hint = f"{source.problem}; {hint}"
    else:
        hint = f"the key from {source.origin} was refused; check that it matches the server's --api-key"
    return f"HTTP {status} on {path}: {hint}"


# ---------------------------------------------------------------- reading a key
def read_key_file(path: str, *, opener: Opener = open_read) -> str:
    """The first line of ``path`` (at most ``KEY_FILE_MAX`` bytes read), stripped; ``OSError``
    saying what is wrong (``UnsafePath`` for a path it will not open, EINVAL for a line that is
    not UTF-8)."""
    line = read_head(path, KEY_FILE_MAX, opener=opener).split(b"\n", 1)[0]
    try:
        return line.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise OSError(errno.EINVAL, "its first line is not UTF-8 text", path) from None


def resolve_key(
    target_cfg: Any,
    pid: int | None,
    cmdline: Iterable[str],
    procfs: Any,
    *,
    environ: Mapping[str, str] | None = None,
    read_file: Callable[[str], str] = read_key_file,
    read_environ: bool = True,
) -> KeySource:
    """Where this target's key comes from. ``target_cfg`` is a ``TargetConfig`` or None
    (autodiscovered); ``procfs`` is the ``ProcFS`` seam for ``/proc/<pid>/environ``, not read
    when ``read_environ`` is False (a read of it blocked a discovery pass before)."""
    environ = os.environ if environ is None else environ
    value: str | None
    env_name = getattr(target_cfg, "api_key_env", None)
    file_path = getattr(target_cfg, "api_key_file", None)
    if env_name:
        src = clean_key(environ.get(env_name), f"config env {env_name}")
        if src.key or src.problem:
            return src
        return KeySource(
            None, f"config env {env_name}", f"api_key_env {env_name} is not set in the guardian's environment"
        )
    if file_path:
        try:
            value = read_file(file_path)
        except OSError as e:
            return KeySource(
                None, f"config file {file_path}", f"api_key_file {file_path}: {e.strerror or type(e).__name__}"
            )
        src = clean_key(value, f"config file {file_path}")
        if src.key or src.problem:
            return src
        return KeySource(None, f"config file {file_path}", f"api_key_file {file_path} is empty")
    if pid is None:
        return NO_KEY
    value = key_from_argv(cmdline)
    if value:
        return clean_key(value, f"--api-key of pid {pid}")
    if not read_environ:
        return KeySource(
            None, "none", f"{ENV_NAME} of pid {pid} not read: a read of its environ blocked a discovery pass"
        )
    try:
        value = procfs.environ_var(pid, ENV_NAME)
    except (TargetGone, AccessDenied, ProbeFailed) as e:
        return KeySource(None, "none", f"cannot read {ENV_NAME} of pid {pid} ({type(e).__name__})")
    src = clean_key(value, f"{ENV_NAME} of pid {pid}")
    return src if src.key or src.problem else NO_KEY


def _claim_rank(target: Any) -> int:
    """How strong a target's claim on its address is: socket owner, configured, anything else."""
    if getattr(target, "socket", "") == "owned":
        return 0
    return 1 if getattr(target, "source", "") == "config" else 2


class ApiKeys:
    """The key of each target's server, refreshed from each discovery pass (``update``).

    Cached per (target, API server identity): a restarted server is read again, and so is
    one whose key was refused (``refused``), so a rotated key file is picked up on the next pass.
    """

    def __init__(
        self,
        cfg: Any,
        procfs: Any,
        *,
        environ: Mapping[str, str] | None = None,
        read_file: Callable[[str], str] = read_key_file,
    ) -> None:
        self._targets_cfg = {t.name: t for t in getattr(cfg, "targets", ())}
        self._procfs = procfs
        self._environ = environ
        self._read_file = read_file
        self._by_target: dict[str, tuple[Any, KeySource]] = {}  # name -> (ProcKey, source)
        self._by_origin: dict[str, KeySource] = {}
        self._stale: set[str] = set()

    def update(self, targets: Iterable[Any], skip: frozenset[Any] = frozenset()) -> None:
        """``targets``: the ``Target`` objects of a discovery pass (``name``, ``key``, ``api_url``,
        ``api_server``); ``skip``: process identities whose /proc reads blocked a pass (their
        environ is never read again)."""
        by_origin: dict[str, KeySource] = {}
        rank_of: dict[str, int] = {}
        seen: dict[str, tuple[Any, KeySource]] = {}
        for t in targets:
            if not t.api_url:
                continue
            cached = self._by_target.get(t.name)
            if cached is not None and cached[0] == t.key and t.name not in self._stale:
                source = cached[1]
            else:
                api = t.api_server
                source = resolve_key(
                    self._targets_cfg.get(t.name),
                    t.key.pid,
                    api.cmdline if api is not None else (),
                    self._procfs,
                    environ=self._environ,
                    read_file=self._read_file,
                    read_environ=t.key not in skip,
                )
                self._stale.discard(t.name)
            seen[t.name] = (t.key, source)
            origin, rank = origin_of(t.api_url), _claim_rank(t)
            if origin not in by_origin or rank < rank_of[origin]:
                by_origin[origin], rank_of[origin] = source, rank
        self._by_target = seen
        self._by_origin = by_origin

    def source_for(self, url: str) -> KeySource:
        return self._by_origin.get(origin_of(url), NO_KEY)

    def refused(self, url: str) -> None:
        """A 401/403 came back: read the key again on the next pass."""
        origin = origin_of(url)
        for name, (_key, source) in self._by_target.items():
            if self._by_origin.get(origin) is source:
                self._stale.add(name)

    def secrets(self) -> tuple[str, ...]:
        """Every key held now (for a log scrubber; never for printing)."""
        return tuple(s.key for _, s in self._by_target.values() if s.key)

    def origins(self) -> dict[str, str]:
        """target name -> where its key came from ("none" when it has none): safe for status."""
        return {name: s.origin for name, (_, s) in self._by_target.items()}

    def status_section(self) -> dict[str, str]:
        """The status's ``api_keys`` section: ``origins``."""
        return self.origins()


class BearerHttpClient:
    """An ``HttpClient`` that adds ``Authorization: Bearer <key>`` to ``/v1/*`` requests of servers
    with a known key, and marks a refused key for re-reading. Everything else passes through."""

    def __init__(self, inner: HttpClient, keys: ApiKeys) -> None:
        self.inner = inner
        self.keys = keys

    def request(
        self, method: str, url: str, timeout: float, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> HttpResponse:
        merged = dict(headers or {})
        if needs_key(url):
            source = self.keys.source_for(url)
            if source.key:
                merged["Authorization"] = f"Bearer {source.key}"
        resp = self.inner.request(method, url, timeout, body=body, headers=merged or None)
        if resp.status in AUTH_STATUSES and needs_key(url):
            self.keys.refused(url)
        return resp

    def auth_source(self, url: str) -> KeySource:
        return self.keys.source_for(url)
