#!/usr/bin/env bash
# The long variant of the fault tests (the suite runs the short one, ctest trace.durability):
# kill -9 at random points + `etr repair` for many rounds, and each fatal-signal case many
# times, each file checked with `etr validate --strict`.
#
#   ./scripts/faults.sh [--rounds N] [--runs M] [BUILD_DIR]     (defaults 100, 20, build/gcc)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=100 runs=20 dir=build/gcc
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) dir=$1; shift ;;
  esac
done
helper=$dir/tests/trace/trace_helper etr=$dir/tools/etr
[ -x "$helper" ] && [ -x "$etr" ] || { echo "faults.sh: build $dir first (./scripts/test.sh --quick)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# A sanitizer's own SIGSEGV/SIGBUS handler would come first and exit (docs/RELIABILITY.md).
export ASAN_OPTIONS="detect_leaks=0:handle_segv=0:handle_sigbus=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export TSAN_OPTIONS="handle_segv=0:handle_sigbus=0${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
fail=0
echo "== fatal signals: $runs runs per case"
for c in "SEGV default 139" "BUS default 135" "ABRT default 134" "TERM default 143" \
         "INT default 130" "INT host-return 0" "TERM host-exit 7" "SEGV host-dfl 139" \
         "BUS host-dfl 135" "TERM host-dfl 143" "INT host-dfl 130" "TERM host-dfl-learnt 143" \
         "INT host-dfl-learnt 130" "ABRT host-return 134"; do
  set -- $c; ok=0 valid=0
  for _ in $(seq "$runs"); do
    rm -f "$tmp/s.json" "$tmp/s.json.host" "$tmp/r.json"
    rc=0; { bash -c "exec $helper signal $tmp/s.json $1 $2"; } >/dev/null 2>&1 || rc=$?
    [ "$rc" -eq "$3" ] && ok=$((ok + 1))
    "$etr" validate --strict --quiet "$tmp/s.json" >/dev/null 2>&1 && valid=$((valid + 1))
  done
  echo "SIG$1 $2: expected exit $3 in $ok/$runs, valid trace in $valid/$runs"
  [ "$ok" -eq "$runs" ] && [ "$valid" -eq "$runs" ] || fail=1
done
echo "== kill -9 + etr repair: $rounds rounds"
ETR_KILL_ROUNDS=$rounds "$dir/tests/trace/trace_test_durability" >"$tmp/kill.log" 2>&1 || fail=1
grep -E "kill -9:|FAILED|ERROR" "$tmp/kill.log" || true
exit $fail
