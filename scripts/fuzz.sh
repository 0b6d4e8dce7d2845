#!/usr/bin/env bash
# scripts/fuzz.sh — build and run the libFuzzer targets of tests/fuzz/ (issue 5 item 5).
#
#   ./scripts/fuzz.sh                           each target 600 s (the long run)
#   ./scripts/fuzz.sh --seconds-per-target N    each target N s
#   ./scripts/fuzz.sh --short                   5 s each (30 s in all); exit 1 on any crash
#   ./scripts/fuzz.sh --targets fuzz_reader     only the targets named (comma separated)
#   ./scripts/fuzz.sh --update-corpus           merge new coverage into tests/fuzz/corpus/
#
# Build: build-fuzz at the top of the tree (ETR_FUZZ_BUILD=DIR for another), clang with
# -DETR_FUZZ=ON (every target built with ASan+UBSan and libFuzzer's coverage
# instrumentation; packages clang and libclang-rt-14-dev). Targets run one after the other,
# one worker each (the machines have 2 cores; ETR_FUZZ_JOBS=N runs N jobs/workers per target
# instead). A target stops at its first crash (libFuzzer's default); fuzz_reader uses the
# dictionary tests/fuzz/fuzz_reader.dict.
# Corpus: tests/fuzz/corpus/<target>/ is read, never written (unless --update-corpus, which
# merges with -merge=1 so only inputs adding coverage go in); new inputs go to a work
# directory (ETR_FUZZ_WORK, default a fresh /tmp/etr-fuzz.XXXXXX, kept and printed) along with
# each target's log and any crash-*/timeout-*/oom-* reproducer. fuzz_reader also gets small
# slices of the real PyTorch traces (ETR_REAL_TRACES_DIR, default ../shared/traces/real) in
# the work directory when that folder exists; they are never copied into the repo.
# Printed per target: executions, exec/s, coverage (cov = edges, ft = features), corpus
# size, crashes. Exit status 1 when a target crashed (or failed to build or run).
set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ETR_ROOT" || exit 1

secs=600
update=0
targets="fuzz_reader,fuzz_escape,fuzz_record,fuzz_commands,fuzz_convert,fuzz_symbolize"
while [ $# -gt 0 ]; do
  case "$1" in
  --seconds-per-target)
    [ $# -ge 2 ] || etr_die "--seconds-per-target needs a number"
    secs=$2
    shift
    ;;
  --seconds-per-target=*) secs=${1#*=} ;;
  --short) secs=5 ;;
  --update-corpus) update=1 ;;
  --targets)
    [ $# -ge 2 ] || etr_die "--targets needs a list, e.g. fuzz_reader,fuzz_escape"
    targets=$2
    shift
    ;;
  --targets=*) targets=${1#*=} ;;
  -h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *) etr_die "unknown argument: $1 (try --help)" ;;
  esac
  shift
done
[[ "$secs" =~ ^[0-9]+$ ]] && [ "$secs" -gt 0 ] || etr_die "seconds must be a positive integer"

# What the fuzz build needs (the rest of lib.sh's list is for the other builds).
ETR_PACKAGES=(clang cmake pkg-config libclang-rt-14-dev libcmocka-dev libjansson-dev
  zlib1g-dev libisal-dev libyajl-dev libdw-dev python3)
etr_ensure_packages

build=${ETR_FUZZ_BUILD:-$ETR_ROOT/build-fuzz}
mkdir -p "$build"
etr_say "fuzz: configure and build $build"
CC=${ETR_FUZZ_CC:-clang} CXX=${ETR_FUZZ_CXX:-clang++} cmake -S "$ETR_ROOT" -B "$build" \
  -DETR_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETR_BUILD_BENCH=OFF >"$build/fuzz-configure.log" 2>&1 ||
  { cat "$build/fuzz-configure.log"; etr_die "configure failed"; }
IFS=, read -r -a tlist <<<"$targets"
cmake --build "$build" -j "$ETR_JOBS" --target "${tlist[@]}" >"$build/fuzz-build.log" 2>&1 ||
  { tail -n 40 "$build/fuzz-build.log"; etr_die "build failed (log: $build/fuzz-build.log)"; }

work=${ETR_FUZZ_WORK:-$(mktemp -d /tmp/etr-fuzz.XXXXXX)}
mkdir -p "$work"
real=${ETR_REAL_TRACES_DIR:-$ETR_ROOT/../shared/traces/real}
jobs=${ETR_FUZZ_JOBS:-1}
# Sanitizer reports are crashes for libFuzzer; leaks are checked per input.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

# fuzz_record's trace files: in a directory of this run's own (tmpfs when there is one).
shm=$(mktemp -d /dev/shm/etr-fuzz.XXXXXX 2>/dev/null || mktemp -d "$work/tmp.XXXXXX")
export ETR_FUZZ_TMP=$shm
# (a trace that failed a check is kept: moved to the work directory)
trap 'for f in "$shm"/*/trace.json.failed; do [ -e "$f" ] && mv "$f" "$work/$(basename "$(dirname "$f")").failed.json"; done; rm -rf "$shm"' EXIT

failed=0
summary=()
for t in "${tlist[@]}"; do
  exe="$build/tests/fuzz/$t"
  [ -x "$exe" ] || etr_die "no fuzz target $exe"
  seeds="$ETR_ROOT/tests/fuzz/corpus/$t"
  dir="$work/$t"
  mkdir -p "$dir/corpus" "$seeds"
  extra=()
  # per-target settings: input size, timeout, which output to close (stdout: validate's
  # verdicts; the reader's stderr: one error line per bad input)
  case "$t" in
  fuzz_reader)
    opts=(-max_len=65536 -timeout=30 -close_fd_mask=3 -dict="$ETR_ROOT/tests/fuzz/fuzz_reader.dict")
    if [ -d "$real" ]; then
      mkdir -p "$dir/real"
      python3 "$ETR_ROOT/tests/fuzz/make_corpus.py" --slices "$dir/real" "$real"/*.json* &&
        extra+=("$dir/real")
    fi
    ;;
  fuzz_escape) opts=(-max_len=16384 -timeout=10 -close_fd_mask=1) ;;
  fuzz_commands)
    # (a JSON file's first byte, '{', already picks six of the commands: real-trace slices
    # are good seeds as they are)
    opts=(-max_len=65536 -timeout=30 -close_fd_mask=3 -rss_limit_mb=3072
      -dict="$ETR_ROOT/tests/fuzz/fuzz_reader.dict")
    if [ -d "$real" ]; then
      mkdir -p "$dir/real"
      python3 "$ETR_ROOT/tests/fuzz/make_corpus.py" --slices "$dir/real" "$real"/*.json* &&
        extra+=("$dir/real")
    fi
    ;;
  fuzz_record) opts=(-max_len=8192 -timeout=60 -close_fd_mask=1 -rss_limit_mb=3072) ;;
  fuzz_convert) opts=(-max_len=65536 -timeout=30 -close_fd_mask=1) ;;
  # (etr symbolize's notes go to stderr; the harness works in a directory of its own, so the
  # corpus paths are absolute, as all here are)
  fuzz_symbolize) opts=(-max_len=65536 -timeout=30 -close_fd_mask=2 -rss_limit_mb=3072) ;;
  *) opts=(-timeout=60) ;;
  esac
  par=()
  [ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
  etr_say "fuzz: $t for ${secs}s (corpus $seeds${extra:+ + real-trace slices}, work $dir)"
  start=$(date +%s)
  (cd "$dir" && "$exe" "${opts[@]}" "${par[@]}" -max_total_time="$secs" -print_final_stats=1 \
    -artifact_prefix="$dir/" "$dir/corpus" "$seeds" "${extra[@]}") >"$dir/log" 2>&1
  rc=$?
  wall=$(($(date +%s) - start))
  [ "$jobs" -gt 1 ] && cat "$dir"/fuzz-*.log >>"$dir/log" 2>/dev/null
  execs=$(awk -F: '/^stat::number_of_executed_units/ { s += $NF } END { print s + 0 }' "$dir/log")
  rate=$(awk -F: '/^stat::average_exec_per_sec/ { s += $NF } END { print s + 0 }' "$dir/log")
  last=$(grep -E '^#[0-9]+.* cov: ' "$dir/log" | tail -n 1)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")
  crashes=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' \
    -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes="?(exit $rc)"; fi
  line="$t: ${execs} execs in ${wall}s, ${rate} exec/s, cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?}, crashes ${crashes}"
  summary+=("$line")
  etr_say "$line"
  if [ "$rc" -ne 0 ]; then
    failed=1
    grep -E 'ERROR|SUMMARY|check failed|Test unit written' "$dir/log" | head -n 20
    etr_warn "$t crashed: reproducer(s) and log in $dir (run: $exe FILE)"
  fi
  if [ "$update" -eq 1 ]; then
    before=$(find "$seeds" -type f | wc -l)
    "$exe" "${opts[@]}" -merge=1 "$seeds" "$dir/corpus" >"$dir/merge.log" 2>&1 ||
      etr_warn "$t: merge failed (log: $dir/merge.log)"
    etr_say "fuzz: $t corpus $before -> $(find "$seeds" -type f | wc -l) files ($(du -sh "$seeds" | cut -f1))"
  fi
done

etr_say "fuzz summary (${secs}s per target, work directory $work):"
printf '    %s\n' "${summary[@]}"
exit "$failed"
