"""Derive twill's machine constants from the raw microbenchmark results (``results/microbench.json``, and
``results/wgmma_serial.json`` from a second device call, ``run_rank_extras.py``).

Each constant of ``machines/h200.toml`` that cites one of them is computed here, with the rule that gives
it; ``tests/test_calibration.py`` checks that the machine file and this derivation agree. Run::

    python benchmarks/calibrate/derive_constants.py      # prints the table, writes results/derived.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _cases(raw: dict[str, Any], test: str) -> list[dict[str, Any]]:
    return raw["tests"][test]["result"]["cases"]


def _named(raw: dict[str, Any], test: str, name: str) -> dict[str, Any]:
    return next(c for c in _cases(raw, test) if c.get("name") == name)


def _lstsq(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def derive(raw: dict[str, Any], serial: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Constants keyed by their dotted machine key: ``{"value": ..., "measured": ..., "rule": ...}``.

    ``raw`` is ``microbench.json``; ``serial`` (``wgmma_serial.json``) adds ``cost.tc_serial_latency``.
    """
    out: dict[str, dict[str, Any]] = {}
    tile_flop = 2 * 64 * 128 * 128
    wg2 = _named(raw, "wgmma", "wg2_m64_each_all_sms")
    out["cost.tc_flops_fp16"] = {
        "measured": wg2["flop_per_cycle_per_sm"], "value": round(wg2["flop_per_cycle_per_sm"]),
        "rule": "wgmma m64n128k16 fp16->fp32, 2 warp groups x 64x128x128 tiles back to back, every SM; "
                "FLOP per SM-clock cycle (median CTA)"}
    wait = _named(raw, "wgmma", "wg1_m64_wait_each_one_cta")
    tc = out["cost.tc_flops_fp16"]["value"]
    latency = wait["median_cycles_per_tile_step"] - tile_flop / tc
    out["cost.tc_latency"] = {
        "measured": latency, "value": round(latency),
        "rule": "one warp group, one 64x128x128 tile GEMM (8 wgmma) issued then waited for, repeated: cycles "
                "per tile minus the throughput time 2*64*128*128/tc_flops_fp16"}
    mufu = _named(raw, "mufu", "ex2_ftz_2048_threads_per_sm")
    out["cost.mufu_per_cycle"] = {
        "measured": mufu["ex2_per_cycle_per_sm"], "value": round(mufu["ex2_per_cycle_per_sm"]),
        "rule": "ex2.approx.ftz.f32 (one MUFU.EX2), 8 independent chains per thread, 2048 threads per SM"}
    stream = _named(raw, "tma", "32KB_all_sms_l2_depth4")
    out["cost.tma_bytes_per_cycle"] = {
        "measured": stream["bytes_per_cycle_per_sm"], "value": round(stream["bytes_per_cycle_per_sm"]),
        "rule": "32 KB TMA loads (2 boxes 128x64 fp16, 128B swizzle) from L2, 4 in flight, every SM: "
                "bytes per SM-clock cycle per SM"}
    lat = _named(raw, "tma", "32KB_all_sms_l2")
    out["cost.tma_latency"] = {
        "measured": lat["median"], "value": int(lat["median"]),
        "rule": "median issue-to-complete latency of a 32 KB TMA load from L2, one in flight per SM, "
                f"every SM loading (min {lat['min']}, p99 {lat['p99']})"}
    rt = {(c["barrier"], c["bytes"]): c["median_round_trip_cycles"] for c in _cases(raw, "sync")}
    out["handoff.named_barrier"] = {
        "measured": rt[("named", 0)] / 2, "value": round(rt[("named", 0)] / 2),
        "rule": "half the round trip of a bar.arrive/bar.sync ping-pong between two warp groups "
                "(256 threads)"}
    out["handoff.mbarrier"] = {
        "measured": rt[("mbarrier_elected", 0)] / 2, "value": round(rt[("mbarrier_elected", 0)] / 2),
        "rule": "half the round trip of an mbarrier ping-pong between two warp groups, one elected thread "
                "arriving after a warp-group bar.sync, the other group waiting with try_wait.parity"}
    xs, ys = [], []
    for (barrier, nbytes), value in sorted(rt.items()):
        if barrier != "syncthreads_256" and nbytes > 0:
            xs.append(nbytes / 1024)
            ys.append(value - rt[(barrier, 0)])
    slope, intercept = _lstsq(xs, ys)
    out["handoff.register_per_kb"] = {
        "measured": slope, "value": round(slope, 1),
        "rule": "least-squares slope over 2-32 KB of (round trip with the bytes - round trip without), "
                "all three barrier kinds pooled: the writer stores the bytes to SMEM from registers "
                "(st.shared.v4), the reader loads them into registers (ld.shared.v4)"}
    out["handoff.register_base"] = {
        "measured": intercept, "value": max(0, round(intercept)),
        "rule": "intercept of the same fit, clamped at 0 (the fixed cost of a hand-off is its barrier, "
                "handoff.mbarrier)"}
    sms = raw["tests"]["wgmma"]["result"]["sms"]
    clock = wg2["tflops_event"] * 1e12 / (sms * wg2["flop_per_cycle_per_sm"])
    out["chip.clock_ghz"] = {
        "measured": clock / 1e9, "value": round(clock / 1e9, 2),
        "rule": "SM clock under a full wgmma load: event-timed FLOP/s of the all-SM wgmma run divided by "
                "SMs x FLOP per cycle per SM"}
    div = {(c["paths"], c["masked"]): c["median_cycles"] for c in _cases(raw, "diverge")}
    per_path = (div[(32, 0)] - 32 * div[(1, 0)]) / 31
    out["cost.divergence_reconverge"] = {
        "measured": per_path, "value": round(per_path),
        "rule": "one warp, lane l on path l % k of k distinct 2048-FFMA paths: (T(32) - 32 T(1)) / 31; "
                "T(k)/T(1) for k = 2..32: "
                + ", ".join(f"{div[(k, 0)] / div[(1, 0)]:.2f}" for k in (2, 3, 4, 8, 16, 32))
                + f"; predicated select over 32 lanes: T/T(1) = {div[(32, 1)] / div[(1, 0)]:.3f}"}
    if serial is not None:
        one = next(c for c in serial["result"]["cases"] if c["name"] == "wg1_m64_serial_one_cta")
        per_instruction = one["median_cycles_per_tile_step"] / (8 * one["acc_per_wg"])
        exposed = per_instruction - 2 * 64 * 128 * 16 / tc
        out["cost.tc_serial_latency"] = {
            "measured": exposed, "value": round(exposed),
            "rule": "one warp group, commit + wait_group 0 after every wgmma m64n128k16 (the serialized "
                    "pipeline of ptxas warning C7511): cycles per instruction minus its throughput time "
                    f"2*64*128*16/tc_flops_fp16 ({per_instruction:.1f} cycles per instruction)"}
    return out


def main() -> int:
    """Print the derived constants and write ``results/derived.json``."""
    raw = json.loads((RESULTS / "microbench.json").read_text(encoding="utf-8"))
    serial_path = RESULTS / "wgmma_serial.json"
    serial = json.loads(serial_path.read_text(encoding="utf-8")) if serial_path.exists() else None
    derived = derive(raw, serial)
    for key, item in derived.items():
        print(f"{key:28s} {item['value']!s:>8s}  (measured {item['measured']:.3f})")
    (RESULTS / "derived.json").write_text(json.dumps(derived, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
