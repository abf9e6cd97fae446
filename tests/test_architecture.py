"""The package layout is the architecture: import contracts, no private cross-module imports, old paths.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``); ``lint-imports`` checks them.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import twill
from twill.moved import MOVED

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    """Run import-linter's ``lint-imports`` on this checkout. Without import-linter the test skips, except
    in CI (``CI`` set), which installs the test extra: there a missing linter is a failure, so a broken
    layer can never pass unseen."""
    if importlib.util.find_spec("importlinter") is None:
        if os.environ.get("CI"):
            pytest.fail("import-linter is not installed in CI: the test extra must install it")
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)


def test_import_contracts_hold():
    proc = lint_imports()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_lint_imports_fails_on_a_broken_contract(tmp_path):
    # twill.verify does import twill.schedule, so a contract forbidding it must break (the runner sees it)
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_package = "twill"\n\n[[tool.importlinter.contracts]]\n'
                      'name = "verify without schedule"\ntype = "forbidden"\n'
                      'source_modules = ["twill.verify"]\n'
                      'forbidden_modules = ["twill.schedule"]\n', encoding="utf-8")
    proc = lint_imports("--config", str(config))
    assert proc.returncode != 0
    assert "1 broken" in proc.stdout


def private_imports(source: str) -> list[str]:
    """``from twill... import _name`` statements in ``source`` (one entry per private name imported).

    A private *alias* of a public name (``import x as _x``) is not one: the name taken is public.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "twill":
            found += [f"l.{node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_")]
    return found


def test_private_import_checker_sees_them():
    # the checker below is only as good as this: it must see these and not the public forms
    assert private_imports("from twill.ir.graph import _op_to_dict\n")
    block = "def f():\n    from twill.solvers.modular import (\n        Item,\n        _Lazy,\n    )\n"
    assert private_imports(block)
    assert not private_imports("from twill.ir.graph import op_to_dict, Graph\n")
    assert not private_imports("from twill import moved as _moved\n")
    assert not private_imports("from os import _exit\n")


def test_no_module_imports_another_modules_private_names():
    found = []
    for path in sorted((ROOT / "twill").rglob("*.py")):
        hits = private_imports(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(ROOT)} {hit}" for hit in hits]
    assert not found, "\n".join(found)


def test_top_level_stays_small():
    assert len(list((ROOT / "twill").glob("*.py"))) <= 12


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_old_path_imports_warns_and_is_the_same_module(old, new):
    module = importlib.import_module(new)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=re.escape(new)):
        aliased = importlib.import_module(old)
    assert aliased is module
    assert sys.modules[old] is module
    assert module.__spec__.name == new  # the alias does not rename the module
    leaf = old.rsplit(".", 1)[1]
    if leaf in twill.__all__:  # twill.explain, twill.simulate: the public function stays the attribute
        assert callable(getattr(twill, leaf)) and getattr(twill, leaf).__module__ == new
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert getattr(twill, leaf) is module


def test_monkeypatching_through_the_old_path_reaches_the_new_module(monkeypatch):
    import twill.model.problem as problem

    sys.modules.pop("twill.problem", None)
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("twill.problem")
    monkeypatch.setattr(old, "RELAXABLE", ("marker",))
    assert problem.RELAXABLE == ("marker",)


def test_unknown_attribute_is_still_an_error():
    with pytest.raises(AttributeError, match="no_such_module"):
        twill.no_such_module  # noqa: B018



def test_contracts_have_no_exceptions():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    names = [c["name"] for c in config["contracts"]]
    assert "Nothing imports the CLI" in names
    assert [c["name"] for c in config["contracts"] if c.get("ignore_imports")] == []


def test_library_modules_carry_no_argparse():
    found = []
    for path in sorted((ROOT / "twill").rglob("*.py")):
        if (ROOT / "twill" / "cli") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names
                      if n.split(".")[0] == "argparse"]
    assert not found, found


def test_ruff_is_clean():
    """``ruff check`` (its configuration in ``pyproject.toml``) finds nothing in the checkout. Without ruff
    the test skips, except in CI, where the test extra installs it."""
    if importlib.util.find_spec("ruff") is None:
        if os.environ.get("CI"):
            pytest.fail("ruff is not installed in CI: the test extra must install it")
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    from ruff.__main__ import find_ruff_bin

    proc = subprocess.run([find_ruff_bin(), "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
