"""The command line as a package: shared option groups, help text, --version, the one parser of each input."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import twill
from twill.cli.main import COMMANDS, build_parser, main
from twill.errors import FrontendError
from twill.frontend.constexprs import constexpr_value, parse_constexprs
from twill.frontend.targets import target_capability, target_for
from twill.ir.machine import load_machine

ROOT = Path(__file__).resolve().parents[1]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}


def test_explain_takes_every_search_flag_of_schedule():
    commands = _subparsers(build_parser())
    schedule, explain = _flags(commands["schedule"]), _flags(commands["explain"])
    # what each command adds on its own: schedule saves the answer, explain chooses its what-ifs
    assert schedule - {"--json"} == explain - {"--families", "--no-pairs"}
    # and the set is the search's own keyword arguments (oracle: twill.schedule's signature)
    import inspect

    keywords = set(inspect.signature(twill.schedule).parameters) - {
        "graph", "machine", "progress", "register_plan", "max_ii"}
    named = {k: f"--{k.replace('_', '-')}" for k in keywords}
    named.update({"cross_group": "--no-cross-group", "ranges": "--no-ranges"})
    assert set(named.values()) <= explain and set(named.values()) <= schedule


BUILDER = """import twill

def build_graph():
    g = twill.Graph("figure1")
    g.add_op("S", "gemm", busy={"tc": 1}, latency=1)
    g.add_op("P", "exp", busy={"mufu": 1}, latency=1)
    g.add_edge("S", "P")
    return g
"""


def test_explain_passes_search_flags_to_every_solve(monkeypatch, tmp_path):
    import twill.analysis.explain as library

    builder = tmp_path / "figure1.py"
    builder.write_text(BUILDER, encoding="utf-8")

    seen = []

    def fake(graph, machine, **options):
        seen.append(options)
        raise twill.InfeasibleError("stop here")

    monkeypatch.setattr(library, "schedule", fake)
    code = main(["explain", f"{builder}::build_graph", "--ilp", "highs",
                 "--modulo", "ilp", "--prefetch", "2", "--no-ranges", "--window-limit", "5",
                 "--families", "handoff", "--no-pairs"])
    assert code == 1
    assert seen and all(o["ilp"] == "highs" and o["modulo"] == "ilp" and o["prefetch"] == 2 and
                        o["ranges"] is False and o["window_limit"] == 5.0 for o in seen)


def _description(help_text: str) -> str:
    """The paragraph between the usage block and the first argument section of an argparse help."""
    body = help_text.split("\n\n", 1)[1]
    return body.split("positional arguments:")[0].split("options:")[0].strip()


def test_top_level_help_and_version():
    run = [sys.executable, "-m", "twill.cli"]
    done = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0]: line.split(None, 1)[1:] for line in done.stdout.splitlines()
              if line.startswith("    ") and line.split()}
    for command in _subparsers(build_parser()):
        assert listed.get(command), f"twill --help lists no description for {command}:\n{done.stdout}"
    version = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=120, check=False)
    assert version.returncode == 0 and version.stdout.strip() == f"twill {twill.__version__}"


@pytest.mark.parametrize("command", sorted(_subparsers(build_parser())))
def test_every_command_has_a_description(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: twill {command}")
    assert len(_description(text)) > 20, text


def test_every_command_module_is_registered():
    names = {p.stem for p in (ROOT / "twill" / "cli").glob("*.py")} - {
        "__init__", "__main__", "main", "options", "common"}
    assert names == {c.__name__.rsplit(".", 1)[1] for c in COMMANDS}


@pytest.mark.parametrize("text", ["0", "64", "-3", "1_024", "0.5", "-2.25", "1e-3", "True", "False"])
def test_constexpr_literals_become_python_values(text):
    expected = ast.literal_eval(text)  # the oracle: Python's own reading of the literal
    value = constexpr_value(text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("false", False), (" 8 ", 8)])
def test_constexpr_lower_case_truth_and_white_space(text, expected):
    value = constexpr_value(text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("text", ["fast", "TRUE", "0x", "tensordesc<fp16[64, 128]>", ""])
def test_constexpr_anything_else_is_text(text):
    assert constexpr_value(text) == text.strip()


def test_constexpr_pairs_and_errors():
    assert parse_constexprs(["A=1", "B = true", "C=x=y"]) == {"A": 1, "B": True, "C": "x=y"}
    for bad in (["BLOCK"], ["=3"]):
        with pytest.raises(FrontendError, match="NAME=VALUE"):
            parse_constexprs(bad)


@pytest.mark.parametrize(("text", "capability"), [("sm_90", 90), ("sm_90a", 90), ("cuda:90", 90),
                                                  (" sm_100 ", 100), ("sm_100a", 100), ("cuda:100", 100)])
def test_target_forms(text, capability):
    assert target_capability(text) == capability


@pytest.mark.parametrize("text", ["sm_80", "90", "sm90", "cuda:89", "sm_90b", "hopper", ""])
def test_target_refused(text):
    with pytest.raises(FrontendError, match="not supported"):
        target_capability(text)


def test_machine_targets_and_bad_arch():
    import dataclasses

    assert [target_for(load_machine(m)) for m in ("h100", "h200", "b200")] == ["sm_90", "sm_90", "sm_100"]
    odd = dataclasses.replace(load_machine("h100"), arch="sm_80")
    with pytest.raises(FrontendError, match="machine 'h100' has arch 'sm_80'"):
        target_for(odd)
