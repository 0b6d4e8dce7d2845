#!/bin/sh
# Runs the example runtime for real and checks its trace with an independent parser
# (Python's json module). Usage: run_example.sh EXAMPLE CHECKER OUTDIR MODE
#   MODE: api      the example opens the trace itself (--out)
#         env      the trace comes from ETR_TRACE alone (no code change)
#         schema110 like api, with --schema 1.1.0
#         traceback like api, with a traceback on every op (resolved names, files, lines)
#         forget   the build that never reports tensor deaths: its trace must FAIL the
#                  checker (ids of reused addresses alias), which shows the checker can fail
set -eu
# (the Python CMake found, when ctest says which: a version manager's `python3` on PATH can
# be a shim costing ~0.1 s a start, and this script starts Python many times)
python3() { command "${ETR_PYTHON:-python3}" "$@"; }
example=$1 checker=$2 out=$3 mode=$4
threads=3
mkdir -p "$out"
trace="$out/trace-$mode.json"
rm -f "$trace"
case "$mode" in
  api) "$example" --out "$trace" --threads $threads --iters 2 ;;
  schema110) "$example" --out "$trace" --threads $threads --iters 2 --schema 1.1.0
    python3 "$checker" "$trace" --threads $threads --iters 2 --schema 1.1.0
    exit $? ;;
  traceback) "$example" --out "$trace" --threads $threads --iters 2 --traceback
    python3 "$checker" "$trace" --threads $threads --iters 2 --traceback
    exit $? ;;
  forget)
    # The program itself notices the aliasing too and exits 1; the trace is still written.
    "$example" --out "$trace" --threads $threads --iters 2 || true
    if python3 "$checker" "$trace" --threads $threads --iters 2 > "$out/forget-check.log" 2>&1; then
      echo "the checker accepted a trace whose ids alias across reused addresses"
      exit 1
    fi
    grep -q "given to two different tensor objects" "$out/forget-check.log" || {
      echo "the checker failed, but not on aliased ids:"; cat "$out/forget-check.log"; exit 1; }
    echo "the checker rejected the aliased ids, as it must"
    exit 0 ;;
  env)
    rm -f "$out"/trace-env-*.json
    ETR_TRACE="$out/trace-env-%p.json" "$example" --threads $threads --iters 2
    set -- "$out"/trace-env-*.json
    [ "$#" -eq 1 ] && [ -f "$1" ] || { echo "ETR_TRACE produced no single trace file: $*"; exit 1; }
    trace=$1 ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
python3 "$checker" "$trace" --threads $threads --iters 2
