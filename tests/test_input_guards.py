"""A new user's bad inputs (outputs that overwrite inputs, mismatched machines, degenerate costs, options of
the wrong type): each is refused up front with a TwillError-family message naming what and where."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import twill
import twill.cli.common
from twill.cli import main
from twill.ir.graph import Graph
from twill.ir.paper import figure1_graph

ROOT = Path(__file__).resolve().parents[1]
GEMM = ROOT / "examples" / "gemm.py"


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Callable[[list[str]], tuple[int, str]]:
    """Run ``twill ARGV`` here; its exit code and stderr on one line."""
    monkeypatch.setattr(twill.cli.common, "ERR", Console(stderr=True, width=10_000))

    def run(argv: list[str]) -> tuple[int, str]:
        code = main(argv)
        return code, " ".join(capsys.readouterr().err.split())

    return run


@pytest.fixture(scope="module")
def fig1_json() -> str:
    return twill.schedule(figure1_graph(), "h100").to_json()


def _graph_file(tmp_path: Path) -> Path:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(figure1_graph().to_dict()))
    return path


# ---------------------------------------------------------------------------- 1, 11, 14: output paths
def test_an_output_that_is_an_input_is_refused(tmp_path: Path, cli: Any, fig1_json: str) -> None:
    graph = _graph_file(tmp_path)
    before = graph.read_text()
    code, err = cli(["schedule", str(graph), "--json", str(graph)])
    assert code == 2 and f"cannot write {graph}: it is the input {graph}" in err
    # the same file by another spelling
    other = tmp_path / "." / "g.json"
    code, err = cli(["schedule", str(graph), "--json", str(other)])
    assert code == 2 and "it is the input" in err
    assert graph.read_text() == before
    kernel = tmp_path / "k.py"
    kernel.write_text(GEMM.read_text())
    code, err = cli(["schedule", f"{kernel}::matmul", "--json", str(kernel)])
    assert code == 2 and "it is the input" in err and kernel.read_text() == GEMM.read_text()
    saved = tmp_path / "s.svg"
    saved.write_text(fig1_json)
    code, err = cli(["plot", str(saved), "-o", str(saved)])
    assert code == 2 and "it is the input" in err and saved.read_text() == fig1_json
    out = tmp_path / "out"
    out.mkdir()
    (out / "schedule.json").write_text(fig1_json)
    code, err = cli(["apply", str(GEMM), "--schedule", str(out / "schedule.json"), "-o", str(out),
                     "--no-compile"])
    assert code == 2 and f"cannot write {out / 'schedule.json'}: it is the input" in err
    code, err = cli(["tune", str(kernel), "--machine", "h100", "--grid", "BLOCK_N=64", "--json", str(kernel)])
    assert code == 2 and "it is the input" in err and "nothing was tuned" in err


def test_an_empty_output_path_is_refused(tmp_path: Path, cli: Any) -> None:
    code, err = cli(["schedule", str(_graph_file(tmp_path)), "--json", ""])
    assert (code, err) == (2, "error (TwillError): an output path is empty; give a file name")
    code, err = cli(["tune", str(GEMM), "--machine", "h100", "--grid", "BLOCK_N=64", "--plot", ""])
    assert code == 2 and "an output path is empty" in err


def test_a_write_the_system_refuses_is_a_cannot_write_error(tmp_path: Path, cli: Any,
                                                            fig1_json: str) -> None:
    target = "/proc/twill_nufix_test.json"
    code, err = cli(["schedule", str(_graph_file(tmp_path)), "--json", target])
    assert code == 2 and err.startswith(f"error (TwillError): cannot write {target}")
    saved = tmp_path / "s.json"
    saved.write_text(fig1_json)
    code, err = cli(["plot", str(saved), "-o", "/proc/twill_nufix_test.svg"])
    assert code == 2 and err.startswith("error (TwillError): cannot write /proc/twill_nufix_test.svg")


def test_a_folder_given_as_an_input_is_named_a_folder(tmp_path: Path, cli: Any) -> None:
    folder = tmp_path / "x.ttgir"
    folder.mkdir()
    code, err = cli(["schedule", str(folder)])
    assert (code, err) == (2, f"error (FrontendError): {folder} is a folder, not a kernel, TTGIR or graph "
                              f"file")
    code, err = cli(["show", str(folder)])
    assert code == 2 and "is a folder, not a saved schedule" in err


# ------------------------------------------------------------------------------------- 7: twill tune
def test_tune_refuses_bad_plot_format_machine_and_cache_before_the_sweep(tmp_path: Path, cli: Any,
                                                                         monkeypatch: Any) -> None:
    import twill.tune.api

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(twill.tune.api, "run_sweep", refuse)
    base = ["tune", str(GEMM), "--grid", "BLOCK_N=64"]
    code, err = cli([*base, "--machine", "h100", "--plot", str(tmp_path / "t.txt")])
    assert code == 2 and "the picture format must be .png, .svg or .pdf" in err
    same = tmp_path / "t.png"
    code, err = cli([*base, "--machine", "h100", "--json", str(same), "--plot", str(same)])
    assert code == 2 and "are the same file" in err
    code, err = cli([*base, "--machine", "a100"])
    assert code == 2 and "a100" in err
    afile = tmp_path / "cache"
    afile.write_text("x")
    code, err = cli([*base, "--machine", "h100", "--cache-dir", str(afile)])
    assert (code, err) == (2, f"error (TwillError): --cache-dir {afile}: it exists and is not a folder")


# ------------------------------------------------------------------------ 2: the machine of a graph
@pytest.fixture(scope="module")
def gemm_h100() -> Graph:
    return twill.graph_from_kernel(f"{GEMM}::matmul", machine="h100")


def test_a_lowered_graph_records_its_machine_and_refuses_another(gemm_h100: Graph) -> None:
    assert gemm_h100.machine == "h100"
    again = Graph.from_dict(json.loads(json.dumps(gemm_h100.to_dict())))
    assert again.machine == "h100"
    assert gemm_h100.map_ops(lambda op: op).machine == "h100"
    for graph in (gemm_h100, again):
        with pytest.raises(twill.GraphError, match=r"graph 'matmul' was lowered for machine 'h100'.*cannot "
                                                   r"be scheduled on 'b200'") as info:
            twill.schedule(graph, "b200")
        assert "'h100''s" not in str(info.value)


def test_a_hand_built_graph_stays_machine_agnostic() -> None:
    g = figure1_graph()
    assert g.machine == "" and "machine" not in g.to_dict()
    assert twill.schedule(g, "b200").ii == twill.schedule(g, "h100").ii


def test_a_graph_json_with_a_machine_of_the_wrong_type(tmp_path: Path) -> None:
    data = figure1_graph().to_dict()
    data["machine"] = 7
    with pytest.raises(twill.GraphError, match=r"graph 'figure1': machine 7 must be a string"):
        Graph.from_dict(data)


# ------------------------------------------------------------------------------ 16: graph JSON types
@pytest.mark.parametrize("value", ["100000", 1.5, True, -1, None])
@pytest.mark.parametrize("key", ["fixed_smem", "fixed_tmem"])
def test_fixed_memory_is_not_coerced(key: str, value: Any) -> None:
    data = figure1_graph().to_dict()
    data[key] = value
    with pytest.raises(twill.GraphError, match=rf"graph 'figure1': {key} {value!r} must be a non-negative "
                                               rf"integer"):
        Graph.from_dict(data)


# --------------------------------------------------------------------------- 3: a machine file's name
def test_a_machine_file_needs_its_own_name(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    body = 'schema = 1\nbase = "h100"\n'
    path.write_text(body)
    with pytest.raises(twill.MachineError, match=r"missing key name: a machine file needs its own name, "
                                                 r"which schedules record \(it would record its base's "
                                                 r"name, 'h100'\)") as info:
        twill.load_machine(path)
    assert str(path) in str(info.value)
    path.write_text(body + 'name = "mine"\n')
    assert twill.load_machine(path).name == "mine"


# ------------------------------------------------------------------------------- 4: sanity limits
def test_a_latency_above_the_sanity_limit_is_refused_when_the_op_is_made() -> None:
    from twill.ir.graph import DURATION_LIMIT

    g = Graph("big")
    with pytest.raises(twill.GraphError, match=rf"op 'S': latency={10**9} is above the sanity limit "
                                               rf"{DURATION_LIMIT} cycles"):
        g.add_op("S", "gemm", busy={"tc": 1}, latency=10**9)
    with pytest.raises(twill.GraphError, match=r"op 'T': reservation of unit 'tc' has cycles=2000000 is "):
        g.add_op("T", "gemm", busy={"tc": 2 * DURATION_LIMIT})
    g.add_op("A", "gemm", busy={"tc": 1}, latency=1)
    g.add_op("B", "gemm", busy={"tc": 1}, latency=1)
    with pytest.raises(twill.GraphError, match=r"edge A->B: latency=1000001 is above the sanity limit"):
        g.add_edge("A", "B", latency=DURATION_LIMIT + 1)


def test_durations_adding_up_past_the_limit_are_refused_at_load_naming_the_op() -> None:
    from twill.ir.graph import DURATION_LIMIT

    data = figure1_graph().to_dict()
    data["ops"][0]["latency"] = DURATION_LIMIT  # each value is within the limit, their sum is not
    name = data["ops"][0]["name"]
    with pytest.raises(twill.GraphError, match=rf"graph 'figure1': the loop's durations add up to "
                                               rf"\d+ cycles, above the sanity limit {DURATION_LIMIT} "
                                               rf"\(op '{name}' alone: {DURATION_LIMIT}"):
        Graph.from_dict(data)
    data["ops"][0]["latency"] = 10**9
    with pytest.raises(twill.GraphError, match=rf"op '{name}': latency={10**9} is above the sanity limit"):
        Graph.from_dict(data)


# ------------------------------------------------------------------------ 5: loops that use no unit
@pytest.mark.parametrize(("latencies", "distances"), [((3,), (1,)), ((2, 5), (0, 2)), ((4, 4), (1, 1))])
def test_a_loop_of_ops_that_use_no_unit_is_scheduled_at_its_recmii(latencies: tuple[int, ...],
                                                                   distances: tuple[int, ...]) -> None:
    import math

    from twill.verify import violations

    g = Graph("nounit")
    names = [f"v{i}" for i in range(len(latencies))]
    for name in names:
        g.add_op(name, "alu", busy={}, latency=0)
    for i, (lat, dist) in enumerate(zip(latencies, distances, strict=True)):
        g.add_edge(names[i], names[(i + 1) % len(names)], latency=lat, distance=dist)
    s = twill.schedule(g, "h100")
    # the only cycle: its latency over its distance, rounded up, is the II (no unit bounds it)
    assert s.ii_cycles == math.ceil(sum(latencies) / sum(distances))
    assert s.certificate.proven_optimal and not violations(s)


# ------------------------------------------------------------------------- 6: rates must be positive
RATES = ["cost.tc_flops_fp16", "cost.tc_flops_fp8", "cost.tma_bytes_per_cycle", "cost.mufu_per_cycle",
         "cost.alu_per_cycle", "cost.convert_per_cycle", "cost.smem_bytes_per_cycle",
         "cost.shuffle_per_cycle", "cost.dram_bytes_per_cycle", "chip.clock_ghz", "chip.sms",
         "chip.max_threads_per_sm"]


@pytest.mark.parametrize("dotted", RATES)
def test_a_zero_rate_in_a_machine_file_is_named(tmp_path: Path, dotted: str) -> None:
    section, key = dotted.split(".")
    path = tmp_path / "m.toml"
    path.write_text(f'schema = 1\nbase = "h100"\nname = "mine"\n[{section}]\n{key} = {{ value = 0, source = '
                    f'"test" }}\n')
    with pytest.raises(twill.MachineError, match=rf"{dotted}\.value = 0 must be > 0") as info:
        twill.load_machine(path)
    assert str(path) in str(info.value)


def test_a_zero_latency_is_still_a_machine(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('schema = 1\nbase = "h100"\nname = "mine"\n[cost]\n'
                    'tc_latency = { value = 0, source = "t" }\n')
    assert twill.load_machine(path).const("cost.tc_latency") == 0


# ------------------------------------------------------------- 9, 14: arithmetic refusals up front
def _no_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    import pulp

    from twill.solvers.smt import SmtSession

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a solver was called")

    monkeypatch.setattr(SmtSession, "__init__", refuse)
    monkeypatch.setattr(pulp.LpProblem, "solve", refuse)


@pytest.mark.parametrize(("rrt", "held", "cycle"), [
    ([("tc", 0, 1, 5)], 5, 0),
    ([("tc", 0, 3, 1), ("tc", 2, 2, 1)], 2, 2),  # two rows of one op overlap at cycle 2
])
def test_a_reservation_above_its_units_capacity_is_refused_before_searching(
        monkeypatch: pytest.MonkeyPatch, rrt: list[tuple[str, int, int, int]], held: int, cycle: int) -> None:
    from twill.errors import ResourceError
    from twill.ir.graph import Reservation

    _no_solver(monkeypatch)
    g = Graph("over")
    g.add_op("S", "gemm", rrt=[Reservation(*r) for r in rrt])
    g.add_edge("S", "S", distance=1)
    with pytest.raises(ResourceError, match=rf"op 'S' reserves {held} of unit 'tc' at cycle {cycle} of its "
                                            rf"reservation table, capacity 1: no II can hold it"):
        twill.schedule(g, "h100")


def test_rows_that_touch_but_do_not_overlap_are_searched() -> None:
    from twill.ir.graph import Reservation

    g = Graph("touch")
    g.add_op("S", "gemm", rrt=[Reservation("tc", 0, 2, 1), Reservation("tc", 2, 2, 1)])
    g.add_edge("S", "S", distance=1)
    assert twill.schedule(g, "h100").ii_cycles == 4  # the op holds tc 4 cycles of each iteration


def test_an_overhead_above_the_register_limit_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from twill.errors import ResourceError

    _no_solver(monkeypatch)
    overhead = twill.load_machine("h100").group_overhead_regs
    with pytest.raises(ResourceError, match=rf"the warp-group overhead alone, {overhead} registers per "
                                            rf"thread, is above the limit {overhead - 6}"):
        twill.schedule(figure1_graph(), "h100", register_limit=overhead - 6)


def test_more_warps_than_a_cta_may_have_are_refused(cli: Any) -> None:
    machine = twill.load_machine("h100")
    warps = machine.max_warps * 2
    code, err = cli(["schedule", str(GEMM), "--num-warps", str(warps)])
    assert (code, err) == (2, f"error (FrontendError): num_warps {warps} is {warps * 32} threads per CTA; "
                              f"machine 'h100' allows at most {machine.max_warps} warps "
                              f"({machine.max_warps * 32} threads) per CTA (warps.max_per_cta)")


# --------------------------------------------------------------------------------- 8: API options
@pytest.mark.parametrize(("options", "message"), [
    ({"progress": 5}, r"progress=5 must be a callable"),
    ({"modulo": "bogus"}, r"modulo 'bogus' is not one of smt, ilp, cpsat"),
    ({"ilp": "glpk"}, r"ilp 'glpk' is not one of cbc, highs"),
    ({"register_plan": []}, r"register_plan=\[\] must be a non-empty list of integers"),
    ({"register_plan": 5}, r"register_plan=5 must be a non-empty list of integers"),
    ({"relax": "registers"}, r"relax='registers' must be a collection of constraint family names"),
    ({"ranges": 1}, r"ranges=1 must be True or False"),
])
def test_bad_options_are_options_errors_naming_the_option(monkeypatch: pytest.MonkeyPatch,
                                                          options: dict[str, Any], message: str) -> None:
    _no_solver(monkeypatch)
    with pytest.raises(twill.OptionsError, match=message) as info:
        twill.schedule(figure1_graph(), "h100", **options)
    assert info.value.option == next(iter(options))


# ------------------------------------------------------------------ 15: contradictory certificates
def _edited(text: str, edit: Callable[[dict[str, Any]], None]) -> str:
    data = json.loads(text)
    edit(data)
    return json.dumps(data)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["certificate"].update(undecided=[d["ii"]]), r"proven_optimal is true but "
                                                            r"certificate.undecided lists II\(s\)"),
    (lambda d: d["certificate"].update(heuristic=True), r"proven_optimal is true but certificate.heuristic"),
    (lambda d: d["certificate"].update(res_mii=0, rec_mii=0),
     r"certificate.lower_bound \d+ is not max\(res_mii 0, rec_mii 0, 1\) = 1"),
    (lambda d: d.update(strategy="swp"), r"proven_optimal is true for strategy 'swp'"),
])
def test_a_contradictory_certificate_is_refused(fig1_json: str, edit: Any, message: str) -> None:
    text = _edited(fig1_json, edit)
    with pytest.raises(twill.TwillError, match=message):
        twill.Schedule.from_json(text)


def test_a_proof_must_cover_every_ii_from_the_lower_bound(fig1_json: str) -> None:
    s = twill.Schedule.from_json(fig1_json)
    lb = s.certificate.lower_bound
    # claim a lower bound one below the II (res_mii lowered with it), with no scope run refuting it
    text = _edited(fig1_json, lambda d: d["certificate"].update(
        lower_bound=d["ii"] - 1, res_mii=d["ii"] - 1, rec_mii=min(d["certificate"]["rec_mii"], d["ii"] - 1),
        scope=[]))
    assert s.ii >= 2 and s.certificate.proven_optimal
    with pytest.raises(twill.TwillError, match=rf"II\(s\) {s.ii - 1} below the schedule's II {s.ii} are "
                                               rf"not refuted for every stage count"):
        twill.Schedule.from_json(text)
    assert twill.Schedule.from_json(fig1_json).certificate.lower_bound == lb  # the file as written loads


# ------------------------------------------------------------------------- 12: user text, not markup
def test_op_names_with_brackets_are_printed_as_named(tmp_path: Path, cli: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    g = Graph("loop[k]")
    g.add_op("acc[i]", "gemm", busy={"tc": 2})
    g.add_op("p[red]", "exp", busy={"mufu": 1})
    g.add_edge("acc[i]", "p[red]")
    g.add_edge("p[red]", "acc[i]", distance=1)
    path = tmp_path / "br.json"
    path.write_text(json.dumps(g.to_dict()))
    out = tmp_path / "br.s.json"
    code = main(["schedule", str(path), "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.startswith("loop[k]: 2 ops")
    # the ops table and the steady-state table name both ops; the summary's title names the loop
    assert printed.count("acc[i]") >= 2 and printed.count("p[red]") >= 2
    assert "loop[k] on h100" in printed
    code = main(["show", str(out)])
    shown = capsys.readouterr().out
    assert code == 0 and shown.count("acc[i]") >= 2 and shown.count("p[red]") >= 2


# ---------------------------------------------------------------- 13: a register verdict adds up
def test_the_live_list_of_a_register_violation_adds_up_to_its_peak() -> None:
    import re
    from dataclasses import replace

    from twill.verify import violations

    g = Graph("copies")
    g.add_op("A", "alu", busy={"alu": 1}, regs=40)
    g.add_op("B", "alu", busy={"alu": 1})
    g.add_edge("A", "B", latency=20)  # A's value lives past one II: several iterations' copies at once
    g.add_edge("A", "A", distance=1)
    s = twill.schedule(g, "h100", max_groups=1)
    low = replace(s.warp_groups[s.group["A"]], registers=24)
    bad = replace(s, warp_groups=tuple(low if w.index == low.index else w for w in s.warp_groups))
    message = next(str(e) for e in violations(bad) if "holds" in str(e))
    peak, overhead, live = re.search(r"holds (\d+) registers per thread .*\((\d+) overhead; live: (.*)\)$",
                                     message).groups()
    terms = re.findall(r"(\w+) \((\d+)(?: x (\d+) copies)?\)", live)
    assert any(copies for _, _, copies in terms), message  # the case with copies is the one exercised
    assert int(overhead) + sum(int(w) * int(c or 1) for _, w, c in terms) == int(peak), message


# ------------------------------------------------------------ 10: Triton's reason and the constexpr
@pytest.mark.parametrize(("value", "reason"), [
    ("48", r"Shape element 1 must be a power of 2 \(constexpr values given: BLOCK_N=48\)"),
    ("abc", r"'str' object has no attribute 'type' \(constexpr values given: BLOCK_N='abc'\)"),
])
def test_a_constexpr_triton_refuses_keeps_its_reason_and_name(cli: Any, value: str, reason: str) -> None:
    import re

    code, err = cli(["schedule", f"{GEMM}::matmul", "--constexpr", f"BLOCK_N={value}"])
    assert code == 2
    assert re.match(rf"error \(FrontendError\): Triton cannot compile 'matmul' for sm_90: {reason}; "
                    rf"CompilationError", err), err
