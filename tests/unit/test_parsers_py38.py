"""The parsers ship inside the guest agent zipapp: standard library only, Python 3.8 syntax and stdlib."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PARSERS = Path(__file__).resolve().parents[2] / "vgpu" / "guest" / "agent" / "parsers"
MODULES = sorted(PARSERS.glob("*.py"))


def test_parser_package_has_modules():
    assert {"rocminfo.py", "amdsmi.py", "rocmsmi.py", "hipblaslt.py", "dkms.py", "lspci.py"} <= \
        {path.name for path in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_is_python38_syntax(path):
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 8))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_imports_only_stdlib_or_siblings(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            continue
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            top = name.split(".")[0]
            assert top == "__future__" or top in sys.stdlib_module_names, "%s imports %s" % (path.name, name)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_uses_future_annotations(path):
    # Annotations like Optional[...] are then never evaluated at runtime on 3.8.
    assert "from __future__ import annotations" in path.read_text(encoding="utf-8")


def test_vermin_finds_nothing_newer_than_python38():
    pytest.importorskip("vermin")
    code = "import sys, vermin; sys.argv = ['vermin'] + sys.argv[1:]; sys.exit(vermin.main())"
    run = subprocess.run([sys.executable, "-c", code, "-t=3.8-", "--no-tips", "--violations", "-q",
                          str(PARSERS)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
