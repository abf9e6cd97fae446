"""A misspelled or unknown field in a user's file is an error naming the field, where it is and the
closest valid name, in every reader: graph JSON (graph, op, edge, reservation row), saved schedule JSON,
machine TOML (an override file included). Before, each of these was ignored and its default used."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

import twill
from twill.cli.main import main
from twill.errors import GraphError, MachineError, TwillError
from twill.ir.fields import closest, unknown_keys_message
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.ir.paper import figure1_graph
from twill.schedule import Schedule


def test_the_message_names_each_unknown_key_with_its_nearest_valid_one() -> None:
    valid = ("src", "dst", "distance", "latency")
    assert unknown_keys_message({"src": 1, "dst": 2}, valid, "edge a->b") is None
    assert unknown_keys_message({"distnce": 1, "zzz": 0}, valid, "edge a->b") == (
        "edge a->b: unknown fields 'distnce' (did you mean 'distance'?), 'zzz'; valid fields: distance, dst, "
        "latency, src")
    assert closest("laetncy", valid) == "latency" and closest("qqqqq", valid) is None


def _graph_dict() -> dict[str, Any]:
    return json.loads(json.dumps(figure1_graph().to_dict()))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(fixed_smen=1024),
     r"graph 'figure1': unknown field 'fixed_smen' \(did you mean 'fixed_smem'\?\)"),
    (lambda d: d["ops"][1].update(issue_cycle=1),
     r"op 'P': unknown field 'issue_cycle' \(did you mean 'issue_cycles'\?\)"),
    (lambda d: d["edges"][2].update(distnce=2),
     r"edge O->O: unknown field 'distnce' \(did you mean 'distance'\?\); valid fields: blocking, carrier"),
    (lambda d: d["ops"][0].update(rrt=[{"unit": "tc", "start": 0, "cycels": 1}]),
     r"op 'S': rrt\[0\]: unknown field 'cycels' \(did you mean 'cycles'\?\); valid fields: count, cycles, "
     r"start, unit"),
])
def test_graph_json_refuses_an_unknown_field(edit: Any, message: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    data = _graph_dict()
    Graph.from_dict(data).check()  # the unedited file loads
    edit(data)
    with pytest.raises(GraphError, match=message):
        Graph.from_dict(data)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    assert main(["schedule", str(path), "--time-limit", "10"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "GraphError" in err and "unknown field" in err and "Traceback" not in err


def test_a_reservation_row_as_an_object_or_a_short_list_means_the_same_table() -> None:
    data = _graph_dict()
    data["ops"][0]["rrt"] = [{"unit": "tc", "start": 0, "cycles": 1}]
    data["ops"][2]["rrt"] = [["tc", 0, 1]]
    assert Graph.from_dict(data).ops == figure1_graph().ops


@pytest.fixture(scope="module")
def saved() -> dict[str, Any]:
    return twill.schedule(figure1_graph(), "h100", time_limit=60).to_dict()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(lenght=4), r"schedule: unknown field 'lenght' \(did you mean 'length'\?\)"),
    (lambda d: d["ops"][0].update(stag=0), r"ops\[0\] \(op '\w+'\): unknown field 'stag' \(did you mean "
                                           r"'stage'\?\)"),
    (lambda d: d["warp_groups"][0].update(warp=4), r"warp_groups\[0\]: unknown field 'warp' \(did you mean "
                                                   r"'warps'\?\)"),
    (lambda d: d["certificate"].update(proven_optimall=True),
     r"certificate: unknown field 'proven_optimall' \(did you mean 'proven_optimal'\?\)"),
    (lambda d: d["problem"]["edges"][0].update(distnce=1),
     r"problem: edge \w+->\w+: unknown field 'distnce' \(did you mean 'distance'\?\)"),
    (lambda d: d["problem"]["ops"][0].update(smme=0),
     r"op '\w+': unknown field 'smme' \(did you mean 'smem'"),
    (lambda d: d["problem"]["resources"].update(smen=1), r"resources: unknown field 'smen' \(did you mean "
                                                         r"'smem'\?\)"),
    (lambda d: d["problem"].update(fixed_smen=0), r"problem: unknown field 'fixed_smen' \(did you mean "
                                                  r"'fixed_smem'\?\)"),
])
def test_a_saved_schedule_refuses_an_unknown_field(saved: dict[str, Any], edit: Any, message: str) -> None:
    data = json.loads(json.dumps(saved))
    Schedule.from_dict(data)  # the unedited file loads
    edit(data)
    with pytest.raises(TwillError, match=message):
        Schedule.from_dict(data)


def _override(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(f'base = "h100"\nname = "mine"\n{body}', encoding="utf-8")
    return path


def test_a_machine_override_refuses_a_key_its_base_does_not_have(tmp_path: Path) -> None:
    ok = _override(tmp_path, '[cost]\ntc_flops_fp16 = { value = 1000, source = "test" }\n')
    assert load_machine(ok).const("cost.tc_flops_fp16") == 1000  # overriding a key the base has works
    bad = _override(tmp_path, '[cost]\ntc_flops_fp61 = { value = 1000, source = "test" }\n')
    with pytest.raises(MachineError, match=r"cost\.tc_flops_fp61 overrides nothing: base machine 'h100' has "
                                           r"no such key \(did you mean cost\.tc_flops_fp16\?\)") as info:
        load_machine(bad)
    assert info.value.key == "cost.tc_flops_fp61"
    bad = _override(tmp_path, '[chip]\nclock_ghx = { value = 1.5, source = "test" }\n')
    with pytest.raises(MachineError, match=r"chip\.clock_ghx overrides nothing.*chip\.clock_ghz"):
        load_machine(bad)


def test_a_machine_file_suggests_the_key_it_meant(tmp_path: Path) -> None:
    text = (resources.files("twill.machines") / "h100.toml").read_text(encoding="utf-8")
    path = tmp_path / "m.toml"
    path.write_text(text.replace("[units.tc]\n", "[units.tc]\ncapacty = 1\n", 1), encoding="utf-8")
    with pytest.raises(MachineError, match=r"units\.tc: unknown key 'capacty' \(did you mean 'capacity'\?\)"):
        load_machine(path)
    path.write_text(text.replace('family = "hopper"\n', 'family = "hopper"\nfamly = "x"\n', 1),
                    encoding="utf-8")
    with pytest.raises(MachineError, match=r"top level: unknown key 'famly' \(did you mean 'family'\?\)"):
        load_machine(path)
