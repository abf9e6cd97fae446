"""Pictures of a schedule: files written, the modulo reservation table, the command line."""

from __future__ import annotations

import pytest

import twill
from twill.cli import main
from twill.errors import TwillError
from twill.ir.paper import figure1_graph
from twill.render.plot import figure, mrt, save


@pytest.fixture(scope="module")
def fig1():
    return twill.schedule(figure1_graph(), "h100")


def test_mrt_of_figure1(fig1):
    # S and O each hold the Tensor Cores one cycle of the two; P holds the MUFU one cycle of the two.
    table = mrt(fig1)
    assert table["tc"] == [1.0, 1.0]
    assert sorted(table["mufu"]) == [0.0, 1.0]
    assert set(table) == {"tc", "mufu"}


def test_save_writes_a_reproducible_svg(tmp_path, fig1):
    data = save(fig1, tmp_path / "a.svg").read_bytes()
    assert len(data) > 5000
    text = data.decode()
    assert "<svg" in text and "modulo reservation table" in text and "steady state" in text
    assert save(fig1, tmp_path / "b.svg").read_bytes() == data  # no dates, fixed ids


def test_save_writes_a_png(tmp_path, fig1):
    data = save(fig1, tmp_path / "fig1.png").read_bytes()
    assert len(data) > 5000 and data.startswith(b"\x89PNG")


def test_figure_has_the_two_panels(fig1):
    fig = figure(fig1, title="Figure 1")
    gantt, heat = fig.axes[:2]
    assert gantt.get_title(loc="left") == "Figure 1"
    assert heat.get_title() == "modulo reservation table"
    # one bar per op and iteration of the straight-line program: 3 ops x 2 stages
    bars = sorted(p.get_gid() for p in gantt.patches if (p.get_gid() or "").startswith("op:"))
    assert bars == sorted(f"op:{v}:{i}" for v in "SPO" for i in range(fig1.stages))


def test_unknown_format_is_refused(tmp_path, fig1):
    with pytest.raises(TwillError, match="svg"):
        save(fig1, tmp_path / "fig1.bmp")


def test_cli_plot(tmp_path, fig1, capsys):
    src = tmp_path / "fig1.json"
    src.write_text(fig1.to_json())
    out = tmp_path / "fig1.svg"
    assert main(["plot", str(src), "-o", str(out)]) == 0
    assert out.stat().st_size > 5000
    assert "wrote" in capsys.readouterr().out
    assert main(["plot", str(tmp_path / "missing.json"), "-o", str(out)]) == 2
