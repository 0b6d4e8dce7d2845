#!/usr/bin/env bash
# scripts/stress.sh — the long stress runs of issue 5 item 6 (the suite runs a short variant:
# ctest entry reliability.stress).
#
#   ./scripts/stress.sh                      everything below, 8 threads x 1 000 000 ops
#   ./scripts/stress.sh --ops 100000         shorter runs
#   ./scripts/stress.sh --only asan,tsan     only the runs named (asan, tsan, valgrind)
#   ./scripts/stress.sh --threads 4          another thread count (default 8)
#
# Runs (build directories at the top of the tree):
#   asan      tests/reliability/stress.c under ASan+UBSan          build-stress-asan
#   tsan      the same under TSan                                   build-stress-tsan
#   valgrind  memcheck of etr-example-runtime (8 workers) and of    build-stress-gcc
#             the stress program (8 threads x 5 000 ops)
# Each stress run: T threads x N ops through the trace while a control thread adds, toggles
# and removes other observers; the trace is then checked with `etr validate --strict`
# (the etr of build-stress-gcc, uninstrumented: the file is what is checked, not the tool)
# and its op count compared with ops_recorded; nodes_dropped must be 0; every op node must
# come before its parent op (a line scan of the file). Extra observers: no callback after
# remove returned, exits never exceed enters and match them in stack order per thread.
# Printed per run: ops, nodes, dropped, sanitizer (or memcheck) reports, wall time; a table
# at the end. Exit status 1 when any run fails or reports anything.
set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ETR_ROOT" || exit 1

ops=1000000
threads=8
only=""
while [ $# -gt 0 ]; do
  case "$1" in
  --ops)
    [ $# -ge 2 ] || etr_die "--ops needs a number"
    ops=$2
    shift
    ;;
  --threads)
    [ $# -ge 2 ] || etr_die "--threads needs a number"
    threads=$2
    shift
    ;;
  --only)
    [ $# -ge 2 ] || etr_die "--only needs a list, e.g. --only asan,tsan"
    only=",$2,"
    shift
    ;;
  -h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *) etr_die "unknown argument: $1 (try --help)" ;;
  esac
  shift
done
want() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }

# Sanitizers: ASan/UBSan stop at the first report (they are built without recovery); TSan
# goes on and exits 66 at the end, so that every race of a run is listed and counted.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=0:exitcode=66:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

gcc_args=(-DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=RelWithDebInfo)

# build DIR TARGETS... [-- cmake args]: configure and build only the targets named.
build() {
  local dir=$1
  shift
  local targets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    targets+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  etr_say "build $dir (${targets[*]})"
  cmake -S "$ETR_ROOT" -B "$ETR_ROOT/$dir" "${gcc_args[@]}" "$@" >/dev/null || return 1
  cmake --build "$ETR_ROOT/$dir" -j "$ETR_JOBS" --target "${targets[@]}" >/dev/null || {
    cmake --build "$ETR_ROOT/$dir" -j 1 --target "${targets[@]}" 2>&1 | tail -30
    return 1
  }
}

# TSan of gcc 12 rejects some kernels' mmap randomisation: then run without it (setarch -R).
tsan_prefix=()
probe_tsan() {
  local d
  d=$(mktemp -d) || return 1
  printf '%s\n' '#include <pthread.h>' 'static void *f(void *a) { return a; }' \
    'int main(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }' \
    >"$d/p.c"
  if gcc -fsanitize=thread -pthread "$d/p.c" -o "$d/p" 2>/dev/null && ! "$d/p" >/dev/null 2>&1; then
    if setarch "$(uname -m)" -R "$d/p" >/dev/null 2>&1; then
      etr_say "TSan needs address randomisation off here: running under setarch -R"
      tsan_prefix=(setarch "$(uname -m)" -R)
    fi
  fi
  rm -rf "$d"
}

# Sanitizer and memcheck reports in a log.
count_reports() {
  grep -cE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer:|^==[0-9]+== (Invalid|Conditional|Use of uninit|Syscall param|Mismatched|Source and destination)|definitely lost in [1-9]' \
    "$1" 2>/dev/null || true
}

rows=()
failed=0

# Seconds since a `date +%s%N` stamp, one decimal.
since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }

# record NAME RC REPORTS SECS OPS NODES DROPPED NOTE
record() {
  local line
  line=$(printf '%-18s %-4s %8s %12s %12s %8s %9s  %s' "$1" "$2" "$3" "$5" "$6" "$7" "$4s" "$8")
  rows+=("$line")
  if [ "$2" != 0 ] || [ "$3" != 0 ]; then failed=1; fi
}

# run_stress NAME DIR [prefix...]: the stress program of DIR, its trace checked by plain etr.
run_stress() {
  local name=$1 dir=$2
  shift 2
  local exe="$dir/tests/reliability/reliability_stress" log="$dir/stress-$name.log"
  local t0 rc secs line ops_n nodes dropped reports
  etr_say "$name: $* $exe --threads $threads --ops $ops (log: $log)"
  t0=$(date +%s%N)
  "$@" "$exe" --threads "$threads" --ops "$ops" --etr "$plain_etr" --out "$dir/stress.json" \
    >"$log.out" 2>"$log"
  rc=$?
  secs=$(since "$t0")
  cat "$log.out"
  line=$(grep '^stress:' "$log.out" | head -n 1)
  ops_n=$(sed -n 's/.*: ops \([0-9]*\),.*/\1/p' <<<"$line")
  nodes=$(sed -n 's/.*, nodes \([-0-9]*\) .*/\1/p' <<<"$line")
  dropped=$(sed -n 's/.* dropped \([0-9]*\),.*/\1/p' <<<"$line")
  reports=$(count_reports "$log")
  if grep -q 'ERROR SUMMARY' "$log"; then # memcheck: its own count
    reports=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -n 1)
  fi
  if [ "$reports" != 0 ] || [ "$rc" != 0 ]; then
    echo "---- $log (first 40 lines)"
    head -n 40 "$log"
  fi
  rm -f "$dir/stress.json"
  record "$name" "$rc" "$reports" "$secs" "${ops_n:-?}" "${nodes:-?}" "${dropped:-?}" \
    "$(sed -n 's/.*; \(record [^;]*\);.*/\1/p' <<<"$line")"
}

suite_start=$(date +%s)

# The plain build: the etr that validates every trace, the example for memcheck.
build build-stress-gcc etr_tool etr-example-runtime reliability_stress || exit 1
plain_etr="$ETR_ROOT/build-stress-gcc/tools/etr"
[ -x "$plain_etr" ] || etr_die "no etr in build-stress-gcc"

if want asan; then
  build build-stress-asan reliability_stress -- -DETR_SANITIZE=address,undefined || exit 1
  run_stress asan+ubsan build-stress-asan
fi

if want tsan; then
  build build-stress-tsan reliability_stress -- -DETR_SANITIZE=thread || exit 1
  probe_tsan
  run_stress tsan build-stress-tsan "${tsan_prefix[@]}"
fi

if want valgrind; then
  if ! command -v valgrind >/dev/null 2>&1; then
    etr_warn "valgrind is not installed: memcheck runs skipped"
  else
    dir=build-stress-gcc
    vg=(valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
      --show-leak-kinds=definite --track-origins=yes --suppressions=scripts/valgrind.supp)
    ex="$dir/examples/etr-example-runtime"
    iters=20
    log="$dir/memcheck-example.log"
    etr_say "memcheck: $ex --out $dir/example.json --threads 8 --iters $iters (log: $log)"
    t0=$(date +%s%N)
    "${vg[@]}" "$ex" --out "$dir/example.json" --threads 8 --iters "$iters" >/dev/null 2>"$log"
    rc=$?
    secs=$(since "$t0")
    errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -n 1)
    verdict=$("$plain_etr" validate --strict --quiet "$dir/example.json" 2>&1)
    vrc=$?
    echo "$verdict"
    python3 tests/integration/check_example_trace.py "$dir/example.json" --threads 8 \
      --iters "$iters" >/dev/null || vrc=1
    [ "$vrc" -eq 0 ] || rc=1
    [ "$rc" -eq 0 ] || tail -n 40 "$log"
    ex_ops=$(sed -n 's/.*nodes (\([0-9]*\) ops.*/\1/p' <<<"$verdict")
    ex_nodes=$(sed -n 's/.*valid: \([0-9]*\) nodes.*/\1/p' <<<"$verdict")
    record memcheck-example "$rc" "${errs:-?}" "$secs" "${ex_ops:-?}" "${ex_nodes:-?}" "-" \
      "8 workers x $iters iters; validate --strict + check_example_trace.py"
    rm -f "$dir/example.json"
    saved_ops=$ops
    ops=5000
    run_stress memcheck-stress "$dir" "${vg[@]}"
    ops=$saved_ops
  fi
fi

echo
printf '%-18s %-4s %8s %12s %12s %8s %9s  %s\n' run rc reports ops nodes dropped wall notes
for r in "${rows[@]}"; do printf '%s\n' "$r"; done
total=$(($(date +%s) - suite_start))
if [ "$failed" -ne 0 ]; then
  printf '\nstress.sh: FAILED in %s\n' "$(etr_fmt_secs "$total")"
  exit 1
fi
printf '\nstress.sh: PASSED in %s\n' "$(etr_fmt_secs "$total")"
