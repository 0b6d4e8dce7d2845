#!/usr/bin/env bash
# scripts/demo.sh — install what is missing, build etr and its example runtime, record a
# trace, check it and summarise it; then record the same run again with no code change,
# through the ETR_TRACE environment variable.
#
#   ./scripts/demo.sh     (options through the environment: DEMO_THREADS, DEMO_ITERS)
#
# Outputs: out/demo/trace.json and out/demo/trace-env.json. Build directory: build/demo.
set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ETR_ROOT" || exit 1

threads=${DEMO_THREADS:-4}
iters=${DEMO_ITERS:-10}
out=out/demo
start=$(date +%s)

etr_say "step 1/4: packages"
etr_ensure_packages

etr_say "step 2/4: build libetr and etr-example-runtime in build/demo"
ETR_BUILD_TARGETS=etr-example-runtime etr_build demo -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DETR_BUILD_TESTS=OFF -DETR_BUILD_BENCH=OFF -DETR_BUILD_TOOLS=OFF ||
  etr_die "the build failed (see the compiler output above)"
exe=$(etr_find_exe build/demo etr-example-runtime)
[ -n "$exe" ] || etr_die "etr-example-runtime was not found in build/demo"

mkdir -p "$out" || etr_die "cannot create $out"
rm -f "$out/trace.json" "$out/trace-env.json"

check_and_summarise() {
  python3 tests/integration/check_example_trace.py "$1" --threads "$threads" --iters "$iters" ||
    etr_die "$1 did not pass tests/integration/check_example_trace.py"
  python3 scripts/trace_summary.py "$1" || etr_die "cannot summarise $1"
}

etr_say "step 3/4: record: $exe --out $out/trace.json --threads $threads --iters $iters"
"$exe" --out "$out/trace.json" --threads "$threads" --iters "$iters" ||
  etr_die "etr-example-runtime failed"
check_and_summarise "$out/trace.json"

etr_say "step 4/4: record through the environment (no code change):"
etr_say "  ETR_TRACE=$out/trace-env.json $exe --threads $threads --iters $iters"
ETR_TRACE="$out/trace-env.json" "$exe" --threads "$threads" --iters "$iters" ||
  etr_die "etr-example-runtime failed under ETR_TRACE"
[ -s "$out/trace-env.json" ] || etr_die "ETR_TRACE did not produce $out/trace-env.json"
check_and_summarise "$out/trace-env.json"

cat <<EOF

demo: done in $(etr_fmt_secs $(($(date +%s) - start))). What it did:
  1. checked the packages the build needs (scripts/lib.sh) and built libetr and
     etr-example-runtime (examples/minitensor.c) in build/demo/
  2. ran the example runtime: $threads worker threads (each with its own backward thread),
     $iters training steps each; it opens, enables and closes the trace through the etr API
       -> $out/trace.json
  3. ran the same program again without --out, with only ETR_TRACE set (no code change)
       -> $out/trace-env.json
  4. checked both traces with tests/integration/check_example_trace.py (file and node
     format, ids, the op tree, threads, tensor ids, collectives) and summarised them
     (scripts/trace_summary.py)
Outputs: $ETR_ROOT/$out/trace.json
         $ETR_ROOT/$out/trace-env.json
The format is the JSON execution trace of PyTorch / MLCommons Chakra: see docs/FORMAT.md.
The etr command (validate, summary, chrome, ...) arrives with a later issue.
EOF
