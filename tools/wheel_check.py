"""``make wheel-check``: the built wheel, installed alone in a clean virtualenv, works.

``python -m tools.wheel_check <wheel> <venv>`` (the venv has the wheel installed, nothing else
of this checkout). Checks, each printed as it passes, exit 1 at the first failure:

- every file of the ``vllm_guardian`` package in the source tree (modules and data: catalogs,
  schemas, ...) is in the wheel but the test fakes (``vllm_guardian/testing/``), and the wheel holds
  no tests; it holds the LICENSE (in its ``.dist-info``) and ``py.typed``;
- installed, the docs, the runbooks and the bash/zsh completion scripts are under the venv's
  ``share/``, and the completion scripts are what ``guardian completion`` prints;
- run from an empty directory (so nothing is imported from the checkout): ``guardian --version``
  says the version of pyproject.toml; ``guardian check-config`` passes on the built-in defaults
  and on every shipped example config; ``guardian <command> --help`` answers for every command;
- ``guardian demo`` (a simulated vLLM server, a busy loop, detection to recovery) exits 0
  (not with ``--no-demo``: the second interpreter of ``make wheel-check``, Python 3.13).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_TIMEOUT_S = 240


def fail(msg: str) -> None:
    print(f"wheel-check: FAIL: {msg}", flush=True)
    sys.exit(1)


def ok(msg: str) -> None:
    print(f"wheel-check: ok   {msg}", flush=True)


def source_files() -> set[str]:
    out = set()
    for path in (ROOT / "vllm_guardian").rglob("*"):
        if "testing" in path.relative_to(ROOT).parts:
            continue  # the fakes of the fast test tiers stay in the repository
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out.add(path.relative_to(ROOT).as_posix())
    return out


def run(venv: Path, args: list[str], cwd: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(
        [str(venv / "bin" / "guardian"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def main(wheel: str, venv_dir: str, demo: bool = True) -> int:
    venv = Path(venv_dir).resolve()
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = source_files() - names
    if missing:
        fail(f"not in the wheel: {sorted(missing)} (add them to [tool.setuptools.package-data])")
    if any(n.startswith(("tests/", "tools/", "benchmarks/")) for n in names):
        fail("the wheel carries tests, tools or benchmarks")
    ok(f"{Path(wheel).name}: all {len(source_files())} package files, no tests")
    if any(n.startswith("vllm_guardian/testing/") for n in names):
        fail("the wheel carries the test fakes (vllm_guardian/testing/)")
    ok("no vllm_guardian/testing/ in the wheel")
    licenses = [n for n in names if ".dist-info/" in n and n.rsplit("/", 1)[-1] == "LICENSE"]
    if not licenses or b"Apache License" not in zipfile.ZipFile(wheel).read(licenses[0]):
        fail("no Apache-2.0 LICENSE in the wheel's .dist-info")
    ok(f"LICENSE in the wheel: {licenses[0]}")
    if "vllm_guardian/py.typed" not in names:
        fail("no vllm_guardian/py.typed in the wheel")
    ok("py.typed in the wheel")
    share = venv / "share"
    for rel in (
        "doc/vllm-guardian/operate.md",
        "doc/vllm-guardian/LICENSE",
        "doc/vllm-guardian/runbooks/busy_loop.md",
        "bash-completion/completions/guardian",
        "zsh/site-functions/_guardian",
    ):
        if not (share / rel).is_file():
            fail(f"not installed: {share / rel}")
    ok(f"docs, runbooks and completion scripts installed under {share}")

    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    with tempfile.TemporaryDirectory(prefix="wheel-check-") as empty:
        res = run(venv, ["--version"], empty)
        if res.returncode != 0 or res.stdout.strip() != f"guardian {version}":
            fail(f"guardian --version: rc {res.returncode}, {res.stdout.strip()!r} {res.stderr.strip()[-300:]}")
        ok(f"guardian --version: {res.stdout.strip()}")
        where = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import vllm_guardian; print(vllm_guardian.__file__)"],
            cwd=empty,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        if not where.startswith(str(venv)):
            fail(f"vllm_guardian is imported from {where!r}, not from the virtualenv")
        ok(f"imported from the virtualenv ({where})")

        res = run(venv, ["check-config", "-c", os.devnull], empty)
        if res.returncode != 0 or "detectors:" not in res.stdout:
            fail(f"guardian check-config (defaults): rc {res.returncode} {res.stderr.strip()[-300:]}")
        examples = sorted((ROOT / "configs").rglob("*.yaml"))
        for path in examples:
            res = run(venv, ["check-config", "-c", str(path)], empty)
            if res.returncode != 0:
                fail(f"guardian check-config -c {path.relative_to(ROOT)}: rc {res.returncode} {res.stderr.strip()}")
        ok(f"guardian check-config: the defaults and {len(examples)} shipped configs")

        for shell, rel in (("bash", "bash-completion/completions/guardian"), ("zsh", "zsh/site-functions/_guardian")):
            res = run(venv, ["completion", shell], empty)
            if res.returncode != 0 or res.stdout != (share / rel).read_text():
                fail(f"guardian completion {shell} differs from the installed {rel} (rc {res.returncode})")
        ok("guardian completion bash|zsh: the installed scripts")

        help_top = run(venv, ["--help"], empty).stdout
        commands = sorted(help_top.split("{", 1)[1].split("}", 1)[0].split(","))
        for name in commands:
            res = run(venv, [name, "--help"], empty)
            if res.returncode != 0 or "examples:" not in res.stdout:
                fail(f"guardian {name} --help: rc {res.returncode}, no examples")
        ok(f"guardian <command> --help for {len(commands)} commands: {', '.join(commands)}")

        if not demo:
            return 0
        res = run(venv, ["demo", "--timeout", "150"], empty, timeout=DEMO_TIMEOUT_S)
        if res.returncode != 0:
            fail(f"guardian demo: rc {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
        last = [line for line in res.stdout.splitlines() if line.strip()][-1:]
        ok(f"guardian demo: exit 0 ({last[0].strip() if last else ''})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["--no-demo"]):
        sys.exit("usage: python -m tools.wheel_check <wheel> <venv> [--no-demo]")
    sys.exit(main(sys.argv[1], sys.argv[2], demo=sys.argv[3:] != ["--no-demo"]))
