#!/bin/sh
# Throughput and peak memory of `etr validate`, `etr summary` and `etr chrome` (its output to
# /dev/null) on a large trace that the recorder itself writes (docs/BENCHMARKS.md: >= 150 MB/s,
# <= 64 MB on a 1 GB trace), compared in the same run with Python's json.load on the same file.
# Never fails on the figures.
#
# usage: bench/cli_throughput.sh [--build DIR] [--size MB] [--runs N] [--py-runs N]
#                                [--dir DIR] [--keep] [--trace FILE] [--instructions MB]
#   --build DIR   build tree holding tools/etr and examples/etr-example-runtime (default
#                 build-bench, else build); a Release build gives the figures to record
#   --size MB     trace size to generate, at least (default 1100: over 1 GB)
#   --runs N      runs of each etr command; the median is reported (default 3)
#   --py-runs N   runs of python3 json.load (default 1; 0 skips it: it needs ~10x the file
#                 in memory)
#   --dir DIR     where to write the trace (default: a temp dir, removed at the end)
#   --keep        keep the trace
#   --trace FILE  measure this trace instead of generating one (e.g. one kept by --keep, to
#                 compare two builds on the same file)
#   --instructions MB  also count the instructions of each etr command (valgrind's callgrind:
#                 what the machine's load does not change) on a trace of MB MB made the same
#                 way, and print them per MB of input (0, the default: not counted)
# etr's own reader (the default, "hand") and its yajl backend (ETR_READER_BACKEND=yajl) are
# both measured: the hand-written parser is the default only because it is faster.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build="" size=1100 runs=3 pyruns=1 dir="" keep=0 given="" imb=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --py-runs) pyruns=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --trace) given=$2; shift 2 ;;
    --instructions) imb=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "cli_throughput.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$build" ]; then
  for b in "$here/build-bench" "$here/build"; do
    [ -x "$b/tools/etr" ] && { build=$b; break; }
  done
fi
etr="$build/tools/etr"
example="$build/examples/etr-example-runtime"
[ -x "$etr" ] && [ -x "$example" ] ||
  { echo "cli_throughput.sh: no tools/etr and examples/etr-example-runtime under '$build' (use --build)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "cli_throughput.sh: needs GNU time (/usr/bin/time; Debian package 'time')" >&2; exit 2; }

cleanup_dir=0
if [ -z "$dir" ]; then
  dir=$(mktemp -d /tmp/etr-cli-bench-XXXXXX)
  cleanup_dir=1
fi
trace="$dir/cli-bench.json"
cleanup() {
  [ $keep -eq 1 ] || [ -n "$given" ] || rm -f "$trace"
  rm -f "$dir/calib.json" "$dir/icount.json" "$dir/callgrind.out"
  [ $cleanup_dir -eq 1 ] && [ $keep -eq 0 ] && rmdir "$dir" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# Calibrate: bytes per training step of the example runtime (2 workers), then size the run.
threads=2
"$example" --out "$dir/calib.json" --threads $threads --iters 20 > /dev/null
cb=$(wc -c < "$dir/calib.json")
rm -f "$dir/calib.json"

# make_trace FILE MB: a trace of at least MB MB; sets iters
make_trace() {
  want=$(($2 * 1000000))
  iters=$(( (want / cb + 1) * 20 * 21 / 20 ))
  [ "$iters" -ge 1 ] || iters=1
  echo "generating a trace of >= $2 MB with $example --threads $threads --iters $iters ..."
  "$example" --out "$1" --threads $threads --iters $iters > /dev/null
  while [ "$(wc -c < "$1")" -lt "$want" ]; do
    iters=$((iters * 11 / 10 + 1))
    "$example" --out "$1" --threads $threads --iters $iters > /dev/null
  done
}

if [ -n "$given" ]; then
  [ -r "$given" ] || { echo "cli_throughput.sh: cannot read $given" >&2; exit 2; }
  trace=$given
  iters="?"
else
  make_trace "$trace" "$size"
fi
bytes=$(wc -c < "$trace")
mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }')
echo "trace: $trace, $mb MB"
# warm the page cache, so every tool reads from memory
cat "$trace" > /dev/null

# run NAME CMD...: N runs, records median seconds and max RSS
measure() {
  name=$1 n=$2
  shift 2
  : > "$dir/times"
  i=0
  while [ $i -lt "$n" ]; do
    /usr/bin/time -f "%e %M %U %S" -o "$dir/one" "$@" > /dev/null 2> "$dir/err" ||
      { echo "$name failed:"; cat "$dir/err"; exit 1; }
    cat "$dir/one" >> "$dir/times"
    i=$((i + 1))
  done
  med=$(awk '{ print $1 }' "$dir/times" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  rss=$(awk '{ if ($2 > m) m = $2 } END { print m }' "$dir/times")
  cpu=$(awk '{ print $3 + $4 }' "$dir/times" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  all=$(awk '{ printf "%s%s", sep, $1; sep = "/" }' "$dir/times")
  awk -v name="$name" -v b="$bytes" -v t="$med" -v c="$cpu" -v r="$rss" -v all="$all" 'BEGIN {
    printf "| %-20s | %8.2f | %7.0f | %8.2f | %7.0f | %8.1f | %s |\n", name, t, (t > 0 ? b / 1e6 / t : 0),
      c, (c > 0 ? b / 1e6 / c : 0), r / 1024, all }' >> "$dir/table"
}

rm -f "$dir/table"
measure "etr validate" "$runs" "$etr" validate --quiet "$trace"
measure "etr summary" "$runs" "$etr" summary "$trace"
measure "etr summary --json" "$runs" "$etr" summary --json "$trace"
# chrome's output goes to /dev/null: the figure is the reading and converting, not the disk
measure "etr chrome" "$runs" "$etr" chrome "$trace" -o /dev/null
# the same through the yajl backend of the reader (ETR_READER_BACKEND=yajl)
measure "etr validate (yajl)" "$runs" env ETR_READER_BACKEND=yajl "$etr" validate --quiet "$trace"
measure "etr summary (yajl)" "$runs" env ETR_READER_BACKEND=yajl "$etr" summary "$trace"
if [ "$pyruns" -gt 0 ]; then
  measure "python3 json.load" "$pyruns" python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$trace"
fi

# Instructions per MB of input (callgrind), when asked: independent of the machine's load.
if [ "$imb" -gt 0 ]; then
  if command -v valgrind > /dev/null; then
    make_trace "$dir/icount.json" "$imb"
    ib=$(wc -c < "$dir/icount.json")
    # icount NAME CMD...: one run under callgrind, its instruction count per MB
    icount() {
      name=$1
      shift
      valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" "$@" > /dev/null 2> "$dir/err" ||
        { echo "$name failed under valgrind:"; cat "$dir/err"; exit 1; }
      ir=$(awk '/^summary:/ { print $2 }' "$dir/callgrind.out")
      awk -v name="$name" -v ir="$ir" -v b="$ib" 'BEGIN {
        printf "| %-20s | %15.0f | %12.0f |\n", name, ir, ir / (b / 1e6) }' >> "$dir/itable"
    }
    rm -f "$dir/itable"
    icount "etr validate" "$etr" validate --quiet "$dir/icount.json"
    icount "etr summary" "$etr" summary "$dir/icount.json"
    icount "etr chrome" "$etr" chrome "$dir/icount.json" -o /dev/null
  else
    echo "cli_throughput.sh: no valgrind: instructions not counted" >&2
    imb=0
  fi
fi

echo
echo "$(uname -m), $(nproc) CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$given" ]; then
  echo "trace $given, $mb MB; page cache warm;"
else
  echo "trace $mb MB ($threads workers x $iters steps of etr-example-runtime); page cache warm;"
fi
echo "wall = median elapsed time of the runs (each run listed), MB/s = file size / wall;"
echo "cpu = median user+system time, MB/s of cpu = file size / cpu (what the machine's load"
echo "does not change); peak RSS = largest of the runs (GNU time, maximum resident set size)"
echo
echo "| command              | wall (s) |    MB/s |  cpu (s) | MB/s of cpu | peak RSS (MB) | runs, wall (s) |"
echo "| -------------------- | -------- | ------- | -------- | ------- | -------- | --- |"
cat "$dir/table"
rm -f "$dir/table" "$dir/times" "$dir/one" "$dir/err"
if [ "$imb" -gt 0 ]; then
  echo
  echo "instructions (valgrind --tool=callgrind, one run) on a trace of $(awk -v b="$ib" 'BEGIN { printf "%.1f", b / 1e6 }') MB made the same way:"
  echo
  echo "| command              |    instructions | per MB       |"
  echo "| -------------------- | --------------- | ------------ |"
  cat "$dir/itable"
  rm -f "$dir/itable"
fi
