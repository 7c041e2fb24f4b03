"""Files are put in place one way: ``fsutil.atomic_write`` is the only code that renames a file
over another (``os.replace`` / ``os.rename``); every durable writer of the package calls it."""

from __future__ import annotations

import ast
from pathlib import Path

import vllm_guardian

PKG_DIR = Path(vllm_guardian.__file__).resolve().parent
RENAMES = {"replace", "rename"}


def renames_in(path: Path) -> list[int]:
    """Lines of ``path`` calling ``os.replace`` or ``os.rename``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in RENAMES
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "os"
    ]


def test_only_fsutil_renames_a_file_into_place():
    found = {str(p.relative_to(PKG_DIR)): lines for p in sorted(PKG_DIR.rglob("*.py")) if (lines := renames_in(p))}
    assert found == {"fsutil.py": found.get("fsutil.py", [])} and found.get("fsutil.py")


def test_a_rename_outside_fsutil_is_found(tmp_path):
    copy = tmp_path / "copy.py"
    copy.write_text("import os\n\ndef put(tmp, path):\n    os.replace(tmp, path)\n", encoding="utf-8")
    assert renames_in(copy) == [4]
