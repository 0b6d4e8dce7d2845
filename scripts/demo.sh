#!/usr/bin/env bash
# scripts/demo.sh — install what is missing, build etr, its `etr` command and the example
# runtimes, then the main job end to end: the example runtime records a trace with a
# traceback on every op, and `etr` validates, summarises, converts (Chrome / Perfetto),
# replays it and folds its stacks; the same run recorded through ETR_TRACE (no code change);
# the example as 2 ranks (2 processes exchanging their collectives), read together by etr
# summary and etr replay; and a Python program on a CPython extension whose tracebacks
# interleave Python and C; and a PyTorch training loop recorded with etr.torch.
#
#   ./scripts/demo.sh     (options through the environment: DEMO_THREADS, DEMO_ITERS)
#
# Outputs in out/demo/: trace.json, trace.chrome.json, trace.folded, trace-env.json,
# trace-env.etr and its conversion trace-env-etr.json,
# ranks/rank-0.json and ranks/rank-1.json, chakra/rank.0.et and chakra/rank.1.et,
# python-trace.json, torch-trace.json. Build directory: build/demo.
set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ETR_ROOT" || exit 1

threads=${DEMO_THREADS:-4}
iters=${DEMO_ITERS:-10}
out=out/demo
start=$(date +%s)

etr_say "step 1/9: packages"
etr_ensure_packages

etr_say "step 2/9: build libetr, etr, etr-example-runtime and the Python example in build/demo"
ETR_BUILD_TARGETS="etr-example-runtime etr_tool etrdemo etr_python etr_torch_python" etr_build demo \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETR_BUILD_TESTS=OFF -DETR_BUILD_BENCH=OFF \
  -DETR_BUILD_TOOLS=ON -DETR_BUILD_EXAMPLES=ON ||
  etr_die "the build failed (see the compiler output above)"
exe=$(etr_find_exe build/demo etr-example-runtime)
[ -n "$exe" ] || etr_die "etr-example-runtime was not found in build/demo"
etr=$(etr_find_exe build/demo etr)
[ -n "$etr" ] || etr_die "the etr command was not found in build/demo"

mkdir -p "$out" || etr_die "cannot create $out"
rm -f "$out"/trace.json "$out"/trace.chrome.json "$out"/trace.folded "$out"/trace-env.json \
  "$out"/python-trace.json "$out"/torch-trace.json "$out"/ranks/rank-*.json

etr_say "step 3/9: record: $exe --out $out/trace.json --threads $threads --iters $iters --traceback"
"$exe" --out "$out/trace.json" --threads "$threads" --iters "$iters" --traceback ||
  etr_die "etr-example-runtime failed"
python3 tests/integration/check_example_trace.py "$out/trace.json" --threads "$threads" \
  --iters "$iters" --traceback ||
  etr_die "$out/trace.json did not pass tests/integration/check_example_trace.py"

etr_say "step 4/9: etr validate --strict, etr summary"
"$etr" validate --strict "$out/trace.json" || etr_die "etr validate rejected $out/trace.json"
"$etr" summary --top 8 "$out/trace.json" || etr_die "etr summary failed on $out/trace.json"

etr_say "step 5/9: etr chrome, etr replay, etr flame"
"$etr" chrome "$out/trace.json" -o "$out/trace.chrome.json" ||
  etr_die "etr chrome failed on $out/trace.json"
"$etr" replay "$out/trace.json" || etr_die "etr replay failed on $out/trace.json"
"$etr" flame "$out/trace.json" -o "$out/trace.folded" ||
  etr_die "etr flame failed on $out/trace.json"
[ -s "$out/trace.folded" ] || etr_die "etr flame wrote no stacks"
etr_say "  $(wc -l < "$out/trace.folded") distinct stacks in $out/trace.folded, e.g.:"
sort -t' ' -k2 -n -r "$out/trace.folded" | head -n 1 | cut -c1-200

etr_say "step 6/9: record through the environment (no code change):"
etr_say "  ETR_TRACE=$out/trace-env.json $exe --threads $threads --iters $iters"
ETR_TRACE="$out/trace-env.json" "$exe" --threads "$threads" --iters "$iters" ||
  etr_die "etr-example-runtime failed under ETR_TRACE"
[ -s "$out/trace-env.json" ] || etr_die "ETR_TRACE did not produce $out/trace-env.json"
python3 tests/integration/check_example_trace.py "$out/trace-env.json" --threads "$threads" \
  --iters "$iters" || etr_die "$out/trace-env.json did not pass the checker"
"$etr" validate --strict "$out/trace-env.json" || etr_die "etr validate rejected $out/trace-env.json"
etr_say "  the same run as a binary event log (the writer makes no JSON), then etr convert:"
etr_say "  ETR_TRACE=$out/trace-env.etr $exe --threads $threads --iters $iters"
rm -f "$out/trace-env.etr" "$out/trace-env-etr.json"
ETR_TRACE="$out/trace-env.etr" "$exe" --threads "$threads" --iters "$iters" ||
  etr_die "etr-example-runtime failed under ETR_TRACE=...etr"
"$etr" convert "$out/trace-env.etr" -o "$out/trace-env-etr.json" ||
  etr_die "etr convert failed on $out/trace-env.etr"
python3 tests/integration/check_example_trace.py "$out/trace-env-etr.json" --threads "$threads" \
  --iters "$iters" || etr_die "$out/trace-env-etr.json did not pass the checker"
"$etr" validate --strict "$out/trace-env-etr.json" ||
  etr_die "etr validate rejected $out/trace-env-etr.json"
etr_say "  $(stat -c %s "$out/trace-env.etr") bytes of binary log, $(stat -c %s "$out/trace-env-etr.json") of JSON"

etr_say "step 7/9: the example as 2 ranks, one process each (a launcher as torchrun: RANK,"
etr_say "  WORLD_SIZE), collectives over sockets: ETR_TRACE=$out/ranks/rank-%r.json $exe --ranks 2"
mkdir -p "$out/ranks" || etr_die "cannot create $out/ranks"
ETR_TRACE="$out/ranks/rank-%r.json" "$exe" --ranks 2 --iters "$iters" ||
  etr_die "etr-example-runtime failed as 2 ranks"
for r in 0 1; do
  python3 tests/integration/check_example_trace.py "$out/ranks/rank-$r.json" --rank $r --world 2 \
    --iters "$iters" || etr_die "$out/ranks/rank-$r.json did not pass the checker"
done
python3 tests/integration/check_ranks.py "$out/ranks/rank-0.json" "$out/ranks/rank-1.json" ||
  etr_die "the two ranks' traces do not agree (tests/integration/check_ranks.py)"
"$etr" summary --top 4 "$out/ranks/rank-0.json" "$out/ranks/rank-1.json" ||
  etr_die "etr summary of the 2 ranks failed"
"$etr" replay --path 4 --alpha-us 5 --beta-gbps 10 "$out/ranks/rank-0.json" \
  "$out/ranks/rank-1.json" || etr_die "etr replay of the 2 ranks failed"
etr_say "  etr chakra: Chakra's protobuf traces for ASTRA-sim, one per rank"
rm -rf "$out/chakra"
"$etr" chakra "$out"/ranks/rank-*.json -o "$out/chakra" ||
  etr_die "etr chakra failed on $out/ranks/rank-*.json"
[ -s "$out/chakra/rank.0.et" ] && [ -s "$out/chakra/rank.1.et" ] ||
  etr_die "etr chakra did not write $out/chakra/rank.0.et and rank.1.et"

etr_say "step 8/9: Python on a CPython extension (examples/python): Python and C frames"
py=$(sed -n 's/^ETR_PYTHON_FOR_EXAMPLES:FILEPATH=//p' build/demo/CMakeCache.txt)
pymod=$(find build/demo -name 'etrdemo*.so' -print -quit)
if [ -z "$py" ] || [ -z "$pymod" ]; then
  etr_die "the Python example (etrdemo) was not built; see the cmake output above"
fi
PYTHONPATH=$(dirname "$pymod") "$py" examples/python/demo.py --out "$out/python-trace.json" \
  --threads 4 --steps 3 || etr_die "examples/python/demo.py failed"
"$etr" validate --strict "$out/python-trace.json" ||
  etr_die "etr validate rejected $out/python-trace.json"
"$etr" flame "$out/python-trace.json" 2>/dev/null | sort -t' ' -k2 -n -r | head -n 1 | cut -c1-240

etr_say "step 9/9: PyTorch: a training loop under etr.torch.trace (examples/torch/train.py)"
PYTHONPATH=build/demo/python /usr/bin/python3 examples/torch/train.py \
  --out "$out/torch-trace.json" --steps 3 || etr_die "examples/torch/train.py failed"
"$etr" validate "$out/torch-trace.json" || etr_die "etr validate rejected $out/torch-trace.json"
"$etr" summary "$out/torch-trace.json" | sed -n '1,12p'

cat <<EOF

demo: done in $(etr_fmt_secs $(($(date +%s) - start))). What it did:
  1. checked the packages the build needs (scripts/lib.sh) and built libetr, the etr
     command, etr-example-runtime (examples/minitensor.c) and the CPython extension
     etrdemo (examples/python/) in build/demo/
  2. ran the example runtime: $threads worker threads (each with its own backward thread),
     $iters training steps each, a traceback on every op; it opens, enables and closes the
     trace through the etr API                          -> $out/trace.json
  3. checked it with an independent parser (tests/integration/check_example_trace.py) and
     with etr validate --strict, summarised it (etr summary), converted it for Perfetto UI /
     chrome://tracing                                   -> $out/trace.chrome.json
     replayed it (etr replay) and folded its stacks     -> $out/trace.folded
     (flamegraph.pl $out/trace.folded > flame.svg, or open it in speedscope)
  4. ran the same program with only ETR_TRACE set       -> $out/trace-env.json
     and again as a binary event log, made JSON by etr convert -> $out/trace-env.etr
  5. ran the example as 2 ranks (2 processes, real allreduce / all-to-all over sockets),
     each recording through ETR_TRACE=.../rank-%r.json  -> $out/ranks/rank-0.json, rank-1.json
     checked both (a process_group:init node, the same collectives in the same order, as
     PARAM's comm replay reads them), then etr summary and etr replay of both ranks: per
     rank makespan, time exposed in communication, the straggler of each collective;
     etr chakra converted them for Chakra / ASTRA-sim  -> $out/chakra/rank.0.et, rank.1.et
  6. ran examples/python/demo.py on 4 Python threads    -> $out/python-trace.json
     (its tracebacks interleave demo.py's functions and lines with the C frames)
  7. trained a small PyTorch model for 3 steps under etr.torch.trace (every aten op and
     autograd function, with tensor shapes and ids; docs/TORCH.md) -> $out/torch-trace.json
The format is the JSON execution trace of PyTorch / MLCommons Chakra: see docs/FORMAT.md;
the etr command: docs/CLI.md.
EOF
