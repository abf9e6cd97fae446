"""``twill tune``'s table says why a config cannot run, for every refusal (a Gluon codegen refusal
included), and the whole reason is printed below the table and kept in ``--json``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from twill.cli.main import main
from twill.tune.report import render_table, short_reason

CODEGEN = ("Gluon codegen: the Gluon backend cannot lower this config: graph op 'sin_3' (kind math) is made "
           "of math.sin at TTGIR line 12, which has no Gluon lowering (the backend lowers TMA descriptor "
           "loads, pointer loads and stores, wgmma, elementwise, comparison, reduction, exp and conversion "
           "ops)")
SMEM = "shared memory: Triton allocates 294976 B per CTA, more than the 232448 B a CTA may use"


def _results() -> list[dict[str, Any]]:
    def row(i: int, block: int, fits: bool, reason: str | None, error: str | None = None) -> dict[str, Any]:
        return {"index": i, "constexprs": {"BLOCK": block}, "num_warps": 4, "num_stages": 3, "fits": fits,
                "reason": reason, "error": error, "predicted_ms": 1.0 if fits else None,
                "predicted_tflops": 100.0 if fits else None, "schedule": None,
                "details": {"registers": 128, "shared_bytes": 65536, "ctas_per_sm": 1}}

    return [row(0, 64, True, None), row(1, 128, False, CODEGEN, "codegen"), row(2, 256, False, SMEM)]


def _cells(table: Any) -> list[str]:
    console = Console(width=400, record=True)
    console.print(table)
    return [" ".join(line.split()) for line in console.export_text().splitlines()]


def test_the_table_shows_a_codegen_refusal_with_its_reason() -> None:
    lines = _cells(render_table(_results(), ["BLOCK"]))
    codegen = next(line for line in lines if line.startswith("│ - │ 128 │"))
    # what refused it (the head) and why (the most specific part, the op and the TTGIR line)
    assert "cannot run: Gluon codegen: graph op 'sin_3'" in codegen
    assert "math.sin at TTGIR line 12, which has no Gluon lowering" in codegen
    smem = next(line for line in lines if line.startswith("│ - │ 256 │"))
    assert f"cannot run: {SMEM}" in smem  # short enough to show whole


@pytest.mark.parametrize("width", [30, 60, 96])
def test_a_long_reason_is_cut_at_a_word_within_the_width(width: int) -> None:
    text = short_reason(CODEGEN, width)
    assert len(text) <= width and text.startswith("Gluon codegen: ")
    if text.endswith("…"):
        kept = text[:-1]
        assert kept.split()[-1] in CODEGEN.split() or kept.split()[-1].rstrip(",") in CODEGEN.split()


def test_the_command_line_prints_every_refusal_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    results = _results()
    outcome = SimpleNamespace(
        results=results, configs=[], sweep=SimpleNamespace(interrupted=False),
        meta={"kernel_entry": "k.py::k", "problem": {"N": 1}, "finished": 3, "total": 3, "engine": "test",
              "backend": "gluon", "cut": 0})
    monkeypatch.setattr("twill.tune.api.tune", lambda *a, **k: outcome)
    out = tmp_path / "tune.json"
    kernel = tmp_path / "k.py"
    kernel.write_text("")
    assert main(["tune", f"{kernel}::k", "--machine", "h200", "--grid", "BLOCK=64,128,256", "--backend",
                 "gluon", "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"cannot run BLOCK=128 w4 s3: {CODEGEN}" in text
    assert f"cannot run BLOCK=256 w4 s3: {SMEM}" in text
    saved = {c["constexprs"]["BLOCK"]: c for c in json.loads(out.read_text())["configs"]}
    assert saved[128]["reason"] == CODEGEN
