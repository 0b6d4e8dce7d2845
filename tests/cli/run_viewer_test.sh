#!/bin/sh
# A 4-thread example run recorded with ns timing, exported by `etr chrome`, loaded by Chrome
# DevTools' trace engine (viewer_devtools.mjs says what is checked). Skipped (77) when
# node or the engine's npm package is missing or the engine does not load: scripts/test.sh installs the package into
# build/npm when npm is there.
# usage: run_viewer_test.sh ETR EXAMPLE OUTDIR NODE_MODULES_DIR
set -eu
etr=$1 example=$2 out=$3 modules=$4
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is not installed"
  exit 77
fi
if [ ! -f "$modules/@paulirish/trace_engine/analyze-trace.mjs" ]; then
  echo "SKIP: no @paulirish/trace_engine under $modules (scripts/test.sh installs it with npm)"
  exit 77
fi
rm -rf "$out"
mkdir -p "$out"
ETR_TRACE="$out/viewer-%p.json" ETR_TRACE_TIMING=ns "$example" --threads 4 --iters 3 >/dev/null
trace=$(ls "$out"/viewer-*.json | head -n 1)
"$etr" chrome "$trace" -o "$out/viewer.chrome.json"
node "$here/viewer_devtools.mjs" "$modules" "$trace" "$out/viewer.chrome.json"
