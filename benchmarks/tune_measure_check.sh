#!/usr/bin/env bash
# Check `twill tune --measure` for real: both examples (GEMM, FA forward), both backends (triton, gluon),
# the top K = 3 configs of a 4-config grid each, on the H200.
#
#   bash benchmarks/tune_measure_check.sh prepare      # CPU, twill installed (about 2 minutes on 2 cores)
#   bash benchmarks/tune_measure_check.sh measure      # GPU machine, torch + Triton only (under 3 minutes)
#   bash benchmarks/tune_measure_check.sh score [DIR]  # CPU: predicted vs measured and Spearman per run
#
# `prepare` writes .tune_check/ (the four `twill tune --json` files and, under .tune_check/cache/gluon, the
# generated Gluon kernels, paths relative to the repository root; git-ignored: carry it to the GPU machine).
# `measure` times each file's top 3 with benchmarks/tune_measure.py (twill/tune/bench.py's code:
# triton.testing.do_bench, median; nothing from twill is imported but the Gluon loader) and writes
# <name>.measured.json to $OUT (default .tune_check).
# On a GPU machine that has twill's dependencies, `twill tune ... --measure --top 3` does both in one go.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.tune_check
case "${1:-}" in
  prepare)
    mkdir -p "$DIR"
    for backend in triton gluon; do
      twill tune examples/gemm.py --machine h200 --grid BLOCK_N=64,128 --num-warps 4 --num-stages 3,4 \
        --backend "$backend" --cache-dir "$DIR/cache" --json "$DIR/gemm_$backend.json"
      twill tune examples/flash_attention_fwd.py --machine h200 --grid BLOCK_M=64,128 --num-warps 4,8 \
        --num-stages 2 --backend "$backend" --cache-dir "$DIR/cache" --json "$DIR/fa_$backend.json"
    done ;;
  measure)
    out="${OUT:-$DIR}"
    for f in "$DIR"/gemm_triton.json "$DIR"/gemm_gluon.json "$DIR"/fa_triton.json "$DIR"/fa_gluon.json; do
      echo "== $f"
      timeout 120 python3 benchmarks/tune_measure.py "$f" --top 3 \
        --out "$out/$(basename "$f" .json).measured.json" || echo "FAILED: $f (exit $?)"
    done ;;
  score)
    for f in "${2:-$DIR}"/*.measured.json; do echo "== $f"; python3 benchmarks/tune_measure.py --score "$f"; done ;;
  *)
    echo "usage: $0 prepare|measure|score" >&2; exit 2 ;;
esac
