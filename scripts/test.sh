#!/usr/bin/env bash
# scripts/test.sh — install what is missing, build, and run the whole test suite.
#
#   ./scripts/test.sh           all stages, stops at the first failure (exit 1)
#   ./scripts/test.sh --quick   only stage (a): gcc build + ctest
#   ./scripts/test.sh --only c,d   only the stages named (letters below), in suite order
#
# Stages (build directories under build/):
#   (a) gcc    clang-format check (scripts/format.sh --check), then
#              RelWithDebInfo, -DETR_WERROR=ON, ctest           build/gcc
#   (b) clang  RelWithDebInfo, -DETR_WERROR=ON, ctest           build/clang
#              without the tests of the etr command alone (cli.*, labels bench, analysis,
#              docs) and the two longest Python ones (python.ranks: gloo ranks;
#              torch.run_script): stage (a) runs them; here the library's tests run
#   (c) asan   -DETR_SANITIZE=address,undefined, ctest          build/asan
#   (d) tsan   -DETR_SANITIZE=thread, ctest                     build/tsan
#   (e) install tests (ctest -L install) of the four builds
#   (f) etr-bench --quick smoke run, when etr-bench exists (figures never fail it)
#   (g) valgrind memcheck of etr-example-runtime (also with tracebacks) and of the stress
#       program, when valgrind exists
#   (h) fuzz   the libFuzzer targets for 30 s in all (scripts/fuzz.sh --short)   build/fuzz
#              (the run's corpora, logs and any reproducer: build/fuzz/work)
# Install tests (label "install") run only in stage (e). Sanitizer stages leave out tests
# labelled "slow" when there are any.
set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ETR_ROOT" || exit 1

quick=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
  --quick) quick=1 ;;
  --only)
    [ $# -ge 2 ] || etr_die "--only needs a list of stages, e.g. --only c,d"
    only=",$2,"
    shift
    ;;
  --only=*) only=",${1#--only=}," ;;
  -h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *) etr_die "unknown argument: $1 (try --help)" ;;
  esac
  shift
done
[ "$quick" -eq 1 ] && only=",a,"
if [ -n "$only" ] && ! [[ "$only" =~ ^,([a-h],)+$ ]]; then
  etr_die "--only takes stage letters a-h separated by commas, e.g. --only c,d"
fi

# Sanitizer reports stop the test that triggers them (harmless for other builds).
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

stage_names=()
stage_secs=()
suite_start=$(date +%s)

times_line() {
  local i out=""
  for i in "${!stage_names[@]}"; do
    out+="${out:+, }${stage_names[$i]} $(etr_fmt_secs "${stage_secs[$i]}")"
  done
  printf '%s' "$out"
}

# run_stage ID TITLE FUNCTION: run one stage, time it, stop the suite when it fails.
run_stage() {
  local id=$1 title=$2 fn=$3 t0 rc
  printf '\n==================== stage (%s) %s ====================\n' "$id" "$title"
  t0=$(date +%s)
  "$fn"
  rc=$?
  stage_names+=("($id) $title")
  stage_secs+=($(($(date +%s) - t0)))
  if [ "$rc" -ne 0 ]; then
    printf '\n==> stage (%s) %s FAILED after %s\n' "$id" "$title" \
      "$(etr_fmt_secs "${stage_secs[-1]}")" >&2
    printf 'test.sh: FAILED at stage (%s) %s [%s]\n' "$id" "$title" "$(times_line)"
    exit 1
  fi
  printf '==> stage (%s) %s passed in %s\n' "$id" "$title" "$(etr_fmt_secs "${stage_secs[-1]}")"
}

# Number of tests in a build dir whose label matches the regex.
count_labelled() {
  ctest --test-dir "$1" -N -L "$2" 2>/dev/null | sed -n 's/^Total Tests: *//p'
}

# run_ctest DIR [LABEL_REGEX [NAME_REGEX]]: every test except those with a label matching
# LABEL_REGEX (default: the install ones) or a name matching NAME_REGEX. (One -LE only:
# given twice, ctest keeps just one of them.)
run_ctest() {
  local dir=$1 exclude=${2:-^install$} names=()
  [ -n "${3:-}" ] && names=(-E "$3")
  ctest --test-dir "$dir" --output-on-failure -j "$ETR_JOBS" --no-tests=error \
    --timeout 600 -LE "$exclude" "${names[@]}"
}

gcc_args=(-DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++)
clang_args=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)

stage_gcc() {
  ./scripts/format.sh --check >/dev/null || { ./scripts/format.sh --check; return 1; }
  etr_npm_viewer
  etr_build gcc "${gcc_args[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETR_WERROR=ON &&
    run_ctest build/gcc
}

stage_clang() {
  etr_build clang "${clang_args[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETR_WERROR=ON &&
    run_ctest build/clang '^(install|bench|analysis|docs)$' '^(cli[.]|python[.]ranks$|torch[.]run_script$)'
}

# Sanitizer stages: no "slow" tests when such a label exists.
sanitizer_ctest() {
  local dir=$1 n
  n=$(count_labelled "$dir" '^slow$')
  if [ "${n:-0}" -gt 0 ]; then
    etr_say "leaving out $n test(s) labelled slow"
    run_ctest "$dir" '^(install|slow)$'
  else
    run_ctest "$dir"
  fi
}

stage_asan() {
  etr_build asan "${gcc_args[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DETR_SANITIZE=address,undefined &&
    sanitizer_ctest build/asan
}

# Some kernels randomise mmap addresses more than TSan of gcc 12 accepts ("unexpected memory
# mapping"); then run the tests with address randomisation off, when that is allowed.
tsan_prefix=()
tsan_probed=0
probe_tsan() {
  [ "$tsan_probed" -eq 0 ] || return 0
  tsan_probed=1
  local d
  d=$(mktemp -d) || return 1
  printf '%s\n' '#include <pthread.h>' 'static void *f(void *a) { return a; }' \
    'int main(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }' \
    >"$d/p.c"
  if gcc -fsanitize=thread -pthread "$d/p.c" -o "$d/p" 2>/dev/null && ! "$d/p" >/dev/null 2>&1; then
    if setarch "$(uname -m)" -R "$d/p" >/dev/null 2>&1; then
      etr_say "TSan needs address randomisation off here: running the tests under setarch -R"
      tsan_prefix=(setarch "$(uname -m)" -R)
    else
      etr_warn "TSan programs do not start on this machine (kernel mmap randomisation?)"
    fi
  fi
  rm -rf "$d"
}

stage_tsan() {
  probe_tsan
  etr_build tsan "${gcc_args[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETR_SANITIZE=thread ||
    return 1
  local n
  n=$(count_labelled build/tsan '^slow$')
  if [ "${n:-0}" -gt 0 ]; then
    etr_say "leaving out $n test(s) labelled slow"
    "${tsan_prefix[@]}" ctest --test-dir build/tsan --output-on-failure -j "$ETR_JOBS" \
      --no-tests=error --timeout 600 -LE '^(install|slow)$'
  else
    "${tsan_prefix[@]}" ctest --test-dir build/tsan --output-on-failure -j "$ETR_JOBS" \
      --no-tests=error --timeout 600 -LE '^install$'
  fi
}

# needs_build DIR: fail unless stage (a)/(b) configured DIR (matters with --only).
needs_build() {
  [ -f "$1/CTestTestfile.cmake" ] || {
    echo "$1 is not built: run its stage first (./scripts/test.sh --only a,...)" >&2
    return 1
  }
}

# Install tests of every build: the consumers of the sanitizer builds use the sanitizer too.
stage_install() {
  local dir prefix
  for dir in build/gcc build/clang build/asan build/tsan; do
    if [ ! -f "$dir/CTestTestfile.cmake" ]; then
      case "$dir" in
      build/gcc | build/clang) needs_build "$dir" || return 1 ;;
      *)
        etr_say "skipped $dir: not built (its stage did not run)"
        continue
        ;;
      esac
    fi
    prefix=()
    if [ "$dir" = build/tsan ]; then
      probe_tsan
      prefix=("${tsan_prefix[@]}")
    fi
    etr_say "install tests of $dir"
    "${prefix[@]}" ctest --test-dir "$dir" --output-on-failure --no-tests=error --timeout 600 \
      -L '^install$' || return 1
  done
}

stage_bench() {
  local bench
  needs_build build/gcc || return 1
  bench=$(etr_find_exe build/gcc etr-bench)
  if [ -z "$bench" ]; then
    etr_say "skipped: etr-bench is not built (bench/ has no target yet)"
    return 0
  fi
  etr_say "$bench --quick (a smoke run: the figures never fail it, a crash does)"
  timeout 600 "$bench" --quick
}

stage_fuzz() {
  # (the run's corpora and logs in the build tree, this run's only: not a new /tmp
  # directory of ~20 MB per run)
  local build=$ETR_ROOT/build/fuzz
  rm -rf "$build/work"
  ETR_FUZZ_BUILD="$build" ETR_FUZZ_WORK="$build/work" ./scripts/fuzz.sh --short
}

stage_valgrind() {
  if ! command -v valgrind >/dev/null 2>&1; then
    etr_say "skipped: valgrind is not installed"
    return 0
  fi
  local exe out=build/gcc/valgrind
  needs_build build/gcc || return 1
  exe=$(etr_find_exe build/gcc etr-example-runtime)
  [ -n "$exe" ] || {
    echo "etr-example-runtime was not built in build/gcc" >&2
    return 1
  }
  rm -rf "$out" && mkdir -p "$out" || return 1
  local vg=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --track-origins=yes --suppressions=scripts/valgrind.supp)
  etr_say "memcheck: $exe --out $out/trace.json --threads 2 --iters 20"
  "${vg[@]}" "$exe" --out "$out/trace.json" --threads 2 --iters 20 || return 1
  python3 tests/integration/check_example_trace.py "$out/trace.json" --threads 2 --iters 20 ||
    return 1
  etr_say "memcheck: ETR_TRACE=$out/trace-env.json $exe --threads 2 --iters 20"
  ETR_TRACE="$out/trace-env.json" "${vg[@]}" "$exe" --threads 2 --iters 20 || return 1
  python3 tests/integration/check_example_trace.py "$out/trace-env.json" --threads 2 --iters 20 ||
    return 1
  etr_say "memcheck: $exe --out $out/trace-tb.json --threads 2 --iters 5 --traceback"
  "${vg[@]}" "$exe" --out "$out/trace-tb.json" --threads 2 --iters 5 --traceback || return 1
  python3 tests/integration/check_example_trace.py "$out/trace-tb.json" --threads 2 --iters 5 \
    --traceback || return 1
  # 8 threads recording while observers come and go (the stress test, short)
  if [ -x build/gcc/tests/reliability/reliability_stress ] && [ -x build/gcc/tools/etr ]; then
    etr_say "memcheck: reliability_stress --threads 8 --ops 2000"
    "${vg[@]}" build/gcc/tests/reliability/reliability_stress --threads 8 --ops 2000 \
      --etr build/gcc/tools/etr --out "$out/stress.json" || return 1
  fi
}

# want ID: is stage ID selected (all are, unless --quick or --only)?
want() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }

run_stage 0 "packages" etr_ensure_packages
want a && run_stage a "gcc" stage_gcc
want b && run_stage b "clang" stage_clang
want c && run_stage c "asan+ubsan" stage_asan
want d && run_stage d "tsan" stage_tsan
want e && run_stage e "install" stage_install
want f && run_stage f "bench smoke" stage_bench
want g && run_stage g "valgrind" stage_valgrind
want h && run_stage h "fuzz (30 s)" stage_fuzz

total=$(($(date +%s) - suite_start))
if [ "$quick" -eq 1 ]; then
  what="quick run (stage a only)"
elif [ -n "$only" ]; then
  what=${only#,}
  what=${what%,}
  what="stages ${what//,/ }"
else
  what="all stages"
fi
printf '\ntest.sh: PASSED %s in %s [%s]\n' "$what" "$(etr_fmt_secs "$total")" "$(times_line)"
