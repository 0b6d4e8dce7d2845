#!/bin/sh
# Runs the built `etr` on real inputs and checks exit codes and output.
# Usage: run_cli_tests.sh ETR EXAMPLE OUTDIR REAL_DIR GOLDEN PART
#   PART ours  a trace recorded by the example runtime, the golden file, gzip, stdin, --help
#        real  the real PyTorch traces (exit 77 = skipped when REAL_DIR is absent)
#        bad   truncated, mangled and rule-breaking files: exit 1, a one-line error naming
#              the file and a byte offset (bad input) or the problem listed (validate)
set -eu
# (the Python CMake found, when ctest says which: a version manager's `python3` on PATH can
# be a shim costing ~0.1 s a start, and this script starts Python many times)
python3() { command "${ETR_PYTHON:-python3}" "$@"; }
etr=$1 example=$2 out=$3 real=$4 golden=$5 part=$6
mkdir -p "$out"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect CODE DESC -- command...: runs it with stdout/stderr in $out/last.{out,err}
expect() {
  want=$1 desc=$2
  shift 3
  set +e
  "$@" > "$out/last.out" 2> "$out/last.err"
  got=$?
  set -e
  if [ "$got" != "$want" ]; then
    fail "$desc: exit $got, wanted $want: $*"
    sed 's/^/    out: /' "$out/last.out" | head -20
    sed 's/^/    err: /' "$out/last.err" | head -20
    return 1
  fi
  return 0
}
out_has() { grep -q -- "$2" "$out/last.out" || { fail "$1: stdout lacks '$2'"; head -20 "$out/last.out"; }; }
err_has() { grep -q -- "$2" "$out/last.err" || { fail "$1: stderr lacks '$2'"; cat "$out/last.err"; }; }
# the one-line error of bad input: exactly one line, naming the file and "byte N"
one_line_error() {
  n=$(wc -l < "$out/last.err")
  [ "$n" -eq 1 ] || { fail "$1: $n lines on stderr"; cat "$out/last.err"; }
  grep -q -- "$2: byte [0-9][0-9]*: " "$out/last.err" ||
    { fail "$1: stderr does not name '$2: byte N: '"; cat "$out/last.err"; }
}
json_check() { # json_check DESC PYTHON-EXPR-ON-d (file in $out/last.out)
  python3 - "$out/last.out" "$2" <<'EOF' || fail "$1: JSON check failed: $2"
import json, sys
d = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2])
if not ok:
    print("  JSON:", json.dumps(d)[:400])
sys.exit(0 if ok else 1)
EOF
}

# same_summary A B: two `summary --json` outputs equal but for the file name
same_summary() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
a.pop("file"); b.pop("file")
sys.exit(0 if a == b else 1)
EOF
}

part_ours() {
  t="$out/ours.json"
  rm -f "$t"
  "$example" --out "$t" --threads 2 --iters 2 > /dev/null
  expect 0 "validate --strict on our trace" -- "$etr" validate --strict "$t" && out_has ours "valid:"
  expect 0 "summary" -- "$etr" summary "$t" &&
    { out_has summary "allreduce"; out_has summary "recorder statistics (etr "; out_has summary "ops by exclusive time"; }
  expect 0 "summary --json" -- "$etr" summary --json --top 5 "$t" && {
    nodes=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["nodes"]))' "$t")
    json_check "summary --json keys" "d['nodes'] == $nodes and d['timing'] and len(d['ops_by_count']) == 5 and d['recorder']['stats']['nodes_written'] >= $nodes - 1 and any(c['collective'] == 'allreduce' and c['in_bytes'] > 0 for c in d['collectives']) and d['tensors']['top_by_bytes'][0]['bytes'] >= d['tensors']['top_by_bytes'][-1]['bytes'] and sum(t['ops'] for t in d['threads']) == d['ops']"
    cp "$out/last.out" "$out/plain.summary.json"
  }
  # gzip (found by magic bytes, whatever the name) and stdin give the same summary
  gzip -c "$t" > "$out/ours.gz"
  expect 0 "summary of gzip" -- "$etr" summary --json --top 5 "$out/ours.gz" &&
    { same_summary "$out/plain.summary.json" "$out/last.out" || fail "gzip summary differs"; }
  # a cut gzip stream: the error names the byte where its decompressed bytes stop, as repair
  # does (it named where the parser was when it read ahead, up to 58 KB before)
  # (what zlib, which etr reads with, gets out of it: gzip(1) has its own inflate, and at
  # about one cut in ten it keeps the last byte back)
  head -c $(($(wc -c < "$out/ours.gz") * 2 / 3)) "$out/ours.gz" > "$out/cut.gz"
  avail=$(python3 -c 'import sys, zlib
print(len(zlib.decompressobj(31).decompress(open(sys.argv[1], "rb").read())))' "$out/cut.gz")
  expect 1 "cut gzip" -- "$etr" validate "$out/cut.gz" && one_line_error "cut gz" "$out/cut.gz" &&
    err_has "cut gzip offset" "cut.gz: byte $avail: gzip: the compressed stream is truncated"
  expect 1 "summary of cut gzip" -- "$etr" summary "$out/cut.gz" &&
    err_has "summary cut gzip offset" "cut.gz: byte $avail: gzip: "
  expect 0 "repair of cut gzip" -- "$etr" repair "$out/cut.gz" -o "$out/cut.gz.json" &&
    err_has "repair of cut gzip" "the gzip stream is cut short at byte $avail"
  # zstd (by magic bytes too; two frames one after the other), when the zstd tool is here;
  # cut short: a one-line error, and `etr repair` keeps the nodes before the cut
  if command -v zstd > /dev/null 2>&1; then
    half=$(($(wc -c < "$t") / 2))
    { head -c "$half" "$t" | zstd -q -c; tail -c +$((half + 1)) "$t" | zstd -q -c; } > "$out/ours.zst"
    expect 0 "summary of zstd" -- "$etr" summary --json --top 5 "$out/ours.zst" &&
      { same_summary "$out/plain.summary.json" "$out/last.out" || fail "zstd summary differs"; }
    head -c $(($(wc -c < "$out/ours.zst") / 3)) "$out/ours.zst" > "$out/cut.zst"
    expect 1 "cut zstd" -- "$etr" validate "$out/cut.zst" && one_line_error "cut zst" "$out/cut.zst"
    expect 0 "repair of cut zstd" -- "$etr" repair "$out/cut.zst" -o "$out/cut.zst.json" &&
      err_has "repair of cut zstd" "the zstd stream is cut short"
    expect 0 "validate the repaired zstd" -- "$etr" validate "$out/cut.zst.json"
  else
    echo "skip: no zstd tool (Debian: zstd)"
  fi
  set +e
  gzip -c "$t" | "$etr" validate --strict - > "$out/last.out" 2> "$out/last.err"
  rc=$?
  set -e
  [ $rc -eq 0 ] || fail "validate of gzip on stdin: exit $rc"
  out_has "stdin" "<stdin>: valid"
  set +e
  "$etr" summary --json --top 5 - < "$t" > "$out/last.out" 2> "$out/last.err"
  rc=$?
  set -e
  [ $rc -eq 0 ] || fail "summary of stdin: exit $rc"
  json_check "stdin summary" "d['file'] == '<stdin>' and d['nodes'] == $nodes"
  expect 0 "summary -o" -- "$etr" summary -o "$out/sum.txt" "$t"
  grep -q "allreduce" "$out/sum.txt" || fail "summary -o wrote no report"
  # schema 1.1.0 (no strides)
  "$example" --out "$out/ours110.json" --threads 1 --iters 1 --schema 1.1.0 > /dev/null
  expect 0 "validate --strict 1.1.0" -- "$etr" validate --strict "$out/ours110.json"
  # the golden file: valid, but its normalised "time" is a warning, an error under --strict
  expect 0 "validate golden" -- "$etr" validate "$golden" && out_has golden "1 warnings"
  expect 1 "validate --strict golden" -- "$etr" validate --strict "$golden" &&
    out_has golden "error: \"time\" is not a string"
  # progress line when forced (stderr is not a terminal here), erased at the end
  big="$out/big.json"
  python3 - "$golden" "$big" <<'EOF'
import sys
s = open(sys.argv[1]).read()
a = s.index('  {"id":2'); b = s.index('  {"id":1,')
body = s[a:b]
with open(sys.argv[2], "w") as f:
    f.write(s[:a])
    i = 0
    while i * len(body) < 6_000_000:
        f.write(body)
        i += 1
    f.write(s[b:])
EOF
  # (a pause in the middle of the input, so that a redraw is due)
  set +e
  { head -c 5000000 "$big"; sleep 0.6; tail -c +5000001 "$big"; } |
    ETR_PROGRESS=1 "$etr" summary - > /dev/null 2> "$out/last.err"
  set -e
  grep -q "etr summary: <stdin> [0-9.]* [kMG]*B read, [0-9]* nodes, [0-9]* MB/s" "$out/last.err" ||
    fail "no progress line with ETR_PROGRESS=1"
  printf '\r\033[K' > "$out/erase"
  [ "$(tail -c 4 "$out/last.err" | od -c)" = "$(od -c < "$out/erase")" ] ||
    fail "the progress line is not erased at the end"
  expect 0 "no progress when not a tty" -- "$etr" summary "$big"
  [ ! -s "$out/last.err" ] || fail "output on stderr without a terminal"
  # command line
  expect 0 "etr --help" -- "$etr" --help && { out_has help validate; out_has help summary; }
  # every help says that zstd is read too, and its exit statuses; repair's usage line names
  # --name (audit13 #8: "gzip-compressed" only, chakra without exit statuses, no --name)
  out_has "etr --help" "gzip- or zstd-compressed"
  for c in validate summary chrome graph replay flame symbolize repair convert chakra; do
    "$etr" $c --help > /dev/null 2>&1 || continue # (not built: chakra without protobuf-c)
    expect 0 "$c --help" -- "$etr" $c --help && {
      out_has "$c --help" "gzip- or zstd-compressed"
      grep -qi "exit status" "$out/last.out" || fail "$c --help: no exit status"
    }
  done
  expect 0 "repair --help" -- "$etr" repair --help &&
    out_has "repair --help" "^usage: etr repair \[--json\] \[--name NAME\] FILE -o OUT$"
  expect 0 "etr --version" -- "$etr" --version && out_has version "etr 0.1.0"
  expect 2 "etr (no command)" -- "$etr"
  expect 2 "etr unknown command" -- "$etr" frobnicate && err_has unknown "unknown command"
  for c in validate summary; do
    expect 0 "$c --help" -- "$etr" $c --help && out_has "$c --help" "usage: etr $c"
    expect 2 "$c without file" -- "$etr" $c && err_has "$c usage" "etr $c: no input file"
    expect 2 "$c bad option" -- "$etr" $c --bogus "$t" && err_has "$c usage" "unknown option"
    # (summary takes several files: one trace per rank, tests/integration/run_ranks.sh)
    [ $c = summary ] || expect 2 "$c two files" -- "$etr" $c "$t" "$t"
  done
  # every command: the same words for an unknown option (long or short) and a missing value
  for c in validate summary chrome graph flame repair replay chakra; do
    expect 2 "$c --bogus" -- "$etr" $c --bogus "$t" &&
      err_has "$c --bogus" "etr $c: unknown option '--bogus'"
    expect 2 "$c -Z" -- "$etr" $c -Z "$t" && err_has "$c -Z" "etr $c: unknown option '-Z'"
  done
  for cv in "validate --max" "summary --top" "chrome -o" "flame -o" "repair -o" "chakra -o" \
    "chakra --rank"; do
    c=${cv% *} o=${cv#* }
    expect 2 "$cv without its value" -- "$etr" $c "$t" $o &&
      err_has "$cv" "etr $c: option '$o' wants a value"
  done
  expect 2 "summary --top x" -- "$etr" summary --top x "$t"
  expect 2 "validate --max -1" -- "$etr" validate --max -1 "$t"
  # sub-µs timing: a 4-thread run recorded with ETR_TRACE_TIMING=ns exports with fewer
  # than 1% zero-length slices, with fractional timestamps; in whole µs, an op shorter than
  # a µs is a zero-length slice (524 of 1,353 on a Release build)
  rm -f "$out"/ns-*.json
  ETR_TRACE="$out/ns-%p.json" ETR_TRACE_TIMING=ns "$example" --threads 4 --iters 3 > /dev/null
  nsf=$(ls "$out"/ns-*.json | head -n 1)
  expect 0 "validate ns timing" -- "$etr" validate "$nsf"
  for mode in ns us; do
    src=$nsf
    if [ $mode = us ]; then # the same trace without its ns attrs
      python3 - "$nsf" "$out/us.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for n in d["nodes"]:
    n["attrs"] = [a for a in n["attrs"] if a["name"] not in ("ts_ns", "dur_ns")]
json.dump(d, open(sys.argv[2], "w"))
PY
      src=$out/us.json
    fi
    expect 0 "chrome ($mode)" -- "$etr" chrome "$src" -o "$out/$mode.chrome.json" &&
      python3 - "$out/$mode.chrome.json" "$mode" <<'PY' || fail "chrome ($mode): zero-length slices or nesting"
import json, sys
d = json.load(open(sys.argv[1]))
xs = [e for e in d["traceEvents"] if e.get("ph") == "X"]
zero = sum(1 for e in xs if e["dur"] == 0)
print("chrome %s: %d of %d slices zero-length" % (sys.argv[2], zero, len(xs)))
if sys.argv[2] == "ns":
    assert zero * 100 < len(xs), "%d of %d slices have duration 0" % (zero, len(xs))
    assert any(isinstance(e["ts"], float) for e in xs), "no fractional timestamps"
# (the µs-only count is printed for comparison: how many ops last under a µs depends on the
# machine and the build, sanitizers included)
PY
  done
  # chrome names each thread from its thread node: thread_name and os_tid (the last
  # thread_name metadata of a thread is the one viewers show)
  expect 0 "chrome" -- "$etr" chrome "$t" -o "$out/ours.chrome.json" && python3 - "$out/ours.chrome.json" "$t" <<'PY' || fail "chrome: thread names, parents before children"
import json, sys
d = json.load(open(sys.argv[1]))
# every slice comes after its parent's slice (viewers nest slices of equal start that way)
parent = {n["id"]: n["ctrl_deps"] for n in json.load(open(sys.argv[2]))["nodes"]}
xs = [e for e in d["traceEvents"] if e.get("ph") == "X"]
pos = {e["args"]["id"]: i for i, e in enumerate(xs)}
late = [e["args"]["id"] for i, e in enumerate(xs) if pos.get(parent.get(e["args"]["id"]), -1) > i]
assert not late, "%d of %d slices come before their parent's" % (len(late), len(xs))
# Kineto's argument names
a = xs[0]["args"]
assert all(k in a for k in ("External id", "Record function id", "Input Dims", "Input type")), sorted(a)
assert any("Sequence number" in e["args"] for e in xs) and any("Fwd thread id" in e["args"] for e in xs)
ev = d["traceEvents"] if isinstance(d, dict) else d
last = {}
for e in ev:
    if e.get("ph") == "M" and e.get("name") == "thread_name":
        last[e["tid"]] = e["args"]["name"]
names = list(last.values())
assert all("(os tid " in n for n in names), names
assert sum(n.startswith("worker ") for n in names) == 2, names
assert sum(n.startswith("autograd backward") for n in names) == 2, names
PY
  # No command overwrites its input: by its own name, a symlink or a hard link to it.
  cp "$t" "$out/victim.json"
  ln -sf victim.json "$out/victim-sym.json"
  ln -f "$out/victim.json" "$out/victim-hard.json"
  for args in "summary VICTIM -o VICTIM" "flame VICTIM -o SYM" "graph --dot HARD VICTIM" \
    "replay --csv SYM VICTIM" "chrome VICTIM -o HARD"; do
    a=$(echo "$args" | sed "s|VICTIM|$out/victim.json|g; s|SYM|$out/victim-sym.json|g; s|HARD|$out/victim-hard.json|g")
    set +e
    # shellcheck disable=SC2086
    "$etr" $a > "$out/last.out" 2> "$out/last.err"
    got=$?
    set -e
    [ "$got" -ne 0 ] || fail "etr $args: exit 0 when the output is the input"
    cmp -s "$t" "$out/victim.json" || { fail "etr $args overwrote its input"; cp "$t" "$out/victim.json"; }
  done
  # Trace strings never reach a terminal raw: an op name that sets the window title (OSC)
  # and one with a C1 CSI are shown escaped in human output.
  python3 - "$t" "$out/hostile-names.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for n in d["nodes"]:
    if n["name"] == "aten::mm":
        n["name"] = "\x1b]0;pwned\x07aten::mm"
    elif n["name"] == "aten::add":
        n["name"] = "\u009b2Jaten::add"
json.dump(d, open(sys.argv[2], "w"))
PY
  for c in summary "replay --path 0" "graph --path 0"; do
    # shellcheck disable=SC2086
    expect 0 "$c of hostile names" -- "$etr" $c "$out/hostile-names.json" &&
      if LC_ALL=C grep -q "$(printf '\033')" "$out/last.out" ||
        python3 -c 'import sys; sys.exit(0 if "\u009b" in open(sys.argv[1], encoding="utf-8", errors="replace").read() else 1)' "$out/last.out"; then
        fail "etr $c printed a raw control sequence"
      fi
  done
  # Checked arithmetic: durations near INT64_MAX saturate (they wrapped negative before, UB),
  # and a trace without any tensor is fine for graph and replay (NULL + 0 before).
  python3 - "$out/huge.json" "$out/notensor.json" <<'PY'
import json, sys
def attrs(tid):
    a = [("rf_id", "uint64", 0), ("fw_parent", "uint64", 0), ("seq_id", "int64", -1),
         ("scope", "uint64", 0), ("tid", "uint64", tid), ("fw_tid", "uint64", 0),
         ("op_schema", "string", ""), ("kernel_backend", "string", ""), ("kernel_file", "string", "")]
    return [{"name": n, "type": t, "value": v} for n, t, v in a]
io = {"values": [], "shapes": [], "types": [], "strides": []}
def node(i, name, parent, tid, timing=None):
    n = {"id": i, "name": name, "ctrl_deps": parent, "inputs": io, "outputs": io}
    if timing:
        n["ts"], n["inclusive_dur"], n["exclusive_dur"] = timing
    n["attrs"] = attrs(tid)
    return n
def trace(path, ops):
    nodes = [node(2, "[pytorch|profiler|execution_trace|thread]", 1, 1)] + ops + \
            [node(1, "[pytorch|profiler|execution_trace|process]", 1, 0)]
    d = {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 0,
         "nodes": nodes, "finish_ts": 1}
    json.dump(d, open(path, "w"))
big = 9000000000000000000
trace(sys.argv[1], [node(3, "big", 2, 1, (big, big, big)), node(4, "big", 2, 1, (big, big, big))])
trace(sys.argv[2], [node(3, "a", 2, 1, (10, 5, 5)), node(4, "b", 2, 1, (20, 5, 5))])
PY
  expect 0 "summary of huge durations" -- "$etr" summary --json "$out/huge.json" &&
    json_check "huge durations saturate" "d['ops_by_exclusive_time'][0]['exclusive_us'] == 2**63 - 1"
  expect 0 "graph without tensors" -- "$etr" graph "$out/notensor.json"
  # A collective without pg_name and one with an empty pg_name both name no group (PyTorch
  # numbers its groups; etr.torch writes "" for one it could not tell): one entry, null in
  # --json, "-" in the text (before: "" in --json, "-" in the text).
  python3 - "$out/notensor.json" "$out/pg.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for n, pg in zip(d["nodes"][1:3], (None, "")):
    n["attrs"] += [{"name": "collective_name", "type": "string", "value": "allreduce"},
                   {"name": "dtype", "type": "string", "value": "Float"},
                   {"name": "in_msg_nelems", "type": "uint64", "value": 4},
                   {"name": "out_msg_nelems", "type": "uint64", "value": 4}]
    if pg is not None:
        n["attrs"].append({"name": "pg_name", "type": "string", "value": pg})
json.dump(d, open(sys.argv[2], "w"))
PY
  expect 0 "summary, missing and empty pg_name" -- "$etr" summary --json "$out/pg.json" &&
    json_check "missing and empty pg_name: no group" "[(c['pg_name'], c['count']) for c in d['collectives']] == [(None, 2)]"
  expect 0 "summary text, missing and empty pg_name" -- "$etr" summary "$out/pg.json" &&
    { grep -qE '^  - +allreduce +2 ' "$out/last.out" && ! grep -qE '^  "" ' "$out/last.out"; } ||
    fail "summary text: a collective with an empty pg_name is not one without a group"
  expect 0 "replay without tensors" -- "$etr" replay "$out/notensor.json"
  # flame's output is bounded: 2000 ops with distinct names sharing one 200000-frame
  # traceback (~80 GB of folded stacks before) keep 256 frames each; --max-bytes stops it.
  python3 - "$out/deep-tb.json" <<'PY'
import json, sys
def attrs(tid, extra=()):
    a = [("rf_id", "uint64", 0), ("fw_parent", "uint64", 0), ("seq_id", "int64", -1),
         ("scope", "uint64", 0), ("tid", "uint64", tid), ("fw_tid", "uint64", 0),
         ("op_schema", "string", ""), ("kernel_backend", "string", ""),
         ("kernel_file", "string", "")] + list(extra)
    return [{"name": n, "type": t, "value": v} for n, t, v in a]
io = {"values": [], "shapes": [], "types": [], "strides": []}
nodes = [{"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1,
          "inputs": io, "outputs": io, "attrs": attrs(1)}]
for i in range(2000):
    nodes.append({"id": 3 + i, "name": "op%d" % i, "ctrl_deps": 2, "inputs": io, "outputs": io,
                  "attrs": attrs(1, [("traceback", "uint64", 0)])})
nodes.append({"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1,
              "inputs": io, "outputs": io, "attrs": attrs(0)})
d = {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 0,
     "nodes": nodes, "finish_ts": 1,
     "frames": [{"name": "recurse", "filename": "r.c", "line": 1}],
     "tracebacks": [[0] * 200000]}
json.dump(d, open(sys.argv[1], "w"))
PY
  expect 0 "flame of a 200000-frame traceback" -- "$etr" flame "$out/deep-tb.json" -o "$out/deep.folded" &&
    err_has "flame deep" "deeper than --max-depth 256 were cut"
  size=$(wc -c < "$out/deep.folded")
  [ "$size" -lt 20000000 ] || fail "flame of a deep traceback wrote $size bytes"
  grep -q '^\[\.\.\. 199744 frames\];recurse' "$out/deep.folded" || fail "flame: no '[... 199744 frames]' root"
  expect 1 "flame --max-bytes" -- "$etr" flame "$out/deep-tb.json" -o "$out/deep2.folded" --max-bytes 100000 &&
    err_has "flame --max-bytes" "reached --max-bytes"
  [ ! -e "$out/deep2.folded" ] || fail "flame --max-bytes left its partial output"
  # etr chakra writes DIR/rank.N.et: an input of that very name is refused too
  if "$etr" chakra --help > /dev/null 2>&1; then
    mkdir -p "$out/cdir"
    cp "$t" "$out/cdir/rank.0.et"
    expect 1 "chakra over its input" -- "$etr" chakra "$out/cdir/rank.0.et" -o "$out/cdir" &&
      err_has "chakra over its input" "refusing to overwrite"
    cmp -s "$t" "$out/cdir/rank.0.et" || fail "etr chakra overwrote its input"
  fi
}

part_real() {
  [ -d "$real" ] || { echo "no real traces in $real: skipped"; exit 77; }
  n=0
  for f in "$real"/*.json "$real"/*.json.gz; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    expect 0 "validate $f" -- "$etr" validate "$f" && out_has "$f" "valid:"
    expect 0 "summary $f" -- "$etr" summary "$f"
    expect 0 "summary --json $f" -- "$etr" summary --json "$f" &&
      json_check "$f json" "d['nodes'] > 0 and d['ops'] > 0 and d['thread_nodes'] >= 1 and d['recorder'] is None"
  done
  [ $n -gt 0 ] || { echo "no traces in $real: skipped"; exit 77; }
  f="$real/param_resnet_et_1.1.0-chakra.0.0.4.json.gz"
  if [ -f "$f" ]; then
    expect 0 "resnet summary" -- "$etr" summary --json "$f" &&
      json_check "resnet" "d['nodes'] == 14392 and d['thread_nodes'] == 2 and any(c['collective'] == 'allreduce' and c['count'] == 15 and c['pg_name'] == '0' for c in d['collectives'])"
    set +e
    gunzip -c "$f" | "$etr" validate - > "$out/last.out" 2>&1
    rc=$?
    set -e
    [ $rc -eq 0 ] || fail "resnet through stdin: exit $rc"
  fi
  f="$real/param_pt2_et_1.1.1-chakra.0.0.4.json"
  if [ -f "$f" ]; then
    # its strides arrays shorter than values are warnings, errors under --strict
    expect 0 "pt2 validate" -- "$etr" validate "$f" && out_has pt2 '"strides" has 5 entries, "values" 6'
    expect 1 "pt2 validate --strict" -- "$etr" validate --strict "$f"
  fi
  f="$real/chakra_1.0.2-chakra.0.0.4.json"
  if [ -f "$f" ]; then
    expect 0 "chakra summary" -- "$etr" summary --json "$f" &&
      json_check "chakra" "d['nodes'] == 263 and d['schema'] == '1.0.2-chakra.0.0.4'"
  fi
}

# mutate NAME PYTHON: applies PYTHON to d (the golden trace loaded) and writes $out/NAME.json
mutate() {
  python3 - "$golden" "$out/$1.json" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
nodes = d["nodes"]
ops = [n for n in nodes if not n["name"].startswith("[pytorch|")]
def attr(n, name):
    return next(a for a in n["attrs"] if a["name"] == name)
exec(sys.argv[3])
json.dump(d, open(sys.argv[2], "w"))
EOF
}

# rule NAME WANTED-MESSAGE PYTHON: the mutated golden file fails validate with that message
rule() {
  mutate "$1" "$3"
  if expect 1 "validate $1" -- "$etr" validate "$out/$1.json"; then
    out_has "$1" "$2"
    out_has "$1" "INVALID"
    grep -q "$out/$1.json: byte [0-9]*: " "$out/last.out" || fail "$1: problem without file and byte"
  fi
}

part_bad() {
  t="$out/ours.json"
  "$example" --out "$t" --threads 1 --iters 1 > /dev/null
  size=$(wc -c < "$t")
  # a failed command never removes a device given as its output (run as root, unlink would)
  head -c 100 "$t" > "$out/short.json"
  for c in chrome symbolize; do
    for dev in /dev/null /dev/full; do
      [ -c "$dev" ] || continue
      expect 1 "$c of a cut trace to $dev" -- "$etr" "$c" "$out/short.json" -o "$dev" || true
      [ -c "$dev" ] || fail "$c -o $dev removed $dev"
    done
  done
  # truncated anywhere: exit 1, one line naming the file and a byte offset
  for cut in 0 1 50 200 1000 $((size / 3)) $((size / 2)) $((size - 40)) $((size - 3)); do
    head -c "$cut" "$t" > "$out/cut.json"
    for c in validate summary; do
      expect 1 "$c of a trace cut at $cut" -- "$etr" $c "$out/cut.json" &&
        one_line_error "$c cut $cut" "$out/cut.json"
    done
  done
  head -c $((size / 2)) "$t" > "$out/cut.json"
  expect 1 "cut" -- "$etr" validate "$out/cut.json" && err_has cut "end of input"
  # the same through stdin and gzip
  set +e
  head -c $((size / 2)) "$t" | "$etr" summary - > /dev/null 2> "$out/last.err"
  rc=$?
  set -e
  [ $rc -eq 1 ] || fail "cut trace on stdin: exit $rc"
  one_line_error "stdin cut" "<stdin>"
  gzip -c "$t" | head -c 3000 > "$out/cut.gz"
  expect 1 "cut gzip" -- "$etr" validate "$out/cut.gz" && one_line_error "cut gz" "$out/cut.gz"
  # mangled bytes: exit 1 with the offset of the damage
  python3 - "$t" "$out/mangled.json" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
pos = b.index(b'"ctrl_deps"', len(b) // 2) + 12
b[pos] = ord('x')
open(sys.argv[2], "wb").write(b)
print(pos, file=open(sys.argv[2] + ".pos", "w"))
EOF
  pos=$(cat "$out/mangled.json.pos")
  expect 1 "mangled" -- "$etr" validate "$out/mangled.json" && {
    one_line_error mangled "$out/mangled.json"
    got=$(sed 's/.*: byte \([0-9]*\): .*/\1/' "$out/last.err")
    [ "$got" -ge $((pos - 2)) ] && [ "$got" -le $((pos + 2)) ] || fail "mangled at $pos, error says byte $got"
  }
  # PyTorch 1.13's own trace (schema 1.0.1: "parent", flat inputs, execution_graph names) is
  # refused by the commands that read ops, one line and exit 1 (it was read as meaningless
  # ops before: every op a leaf, thread nodes as ops); validate too, with the same one line
  # (it listed an error for every node: 64 752 for an LSTM's trace).
  python3 - "$out/pt101.json" <<'EOF'
import json, sys
def n(i, name, parent, tid, **kw):
    d = {"name": name, "id": i, "rf_id": i, "parent": parent, "fw_parent": 0, "seq_id": -1,
         "scope": 0, "tid": tid, "fw_tid": 0, "op_schema": "", "inputs": [], "input_shapes": [],
         "input_types": [], "outputs": [], "output_shapes": [], "output_types": []}
    d.update(kw)
    return d
t = [4, 5, 0, 10, 4, "cpu"]
nodes = [n(2, "[pytorch|profiler|execution_graph|thread]", 1, 1),
         n(3, "c10d::allreduce_", 2, 1, inputs=[[t], "<Object>"],
           input_types=["GenericList[Tensor(float)]", "Object"]),
         n(4, "gloo:all_reduce", 3, 1, inputs=[t], input_types=["Tensor(float)"]),
         n(1, "[pytorch|profiler|execution_graph|process]", 1, 0)]
json.dump({"schema": "1.0.1", "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 0,
           "nodes": nodes, "finish_ts": 1}, open(sys.argv[1], "w"))
EOF
  for c in summary replay graph; do
    expect 1 "$c of a 1.0.1 trace" -- "$etr" $c "$out/pt101.json" &&
      one_line_error "$c 1.0.1" "$out/pt101.json" && err_has "$c 1.0.1" 'schema "1.0.1"'
  done
  for c in summary replay; do
    expect 1 "$c of ranks with a 1.0.1 trace" -- "$etr" $c "$t" "$out/pt101.json" &&
      one_line_error "$c ranks 1.0.1" "$out/pt101.json"
  done
  # chrome, flame and symbolize too (they wrote meaningless output, exit 0), and repair (it
  # added a second node with id 1, in our layout, to the intact file): nothing written
  head -c 600 "$out/pt101.json" > "$out/pt101cut.json"
  for c in chrome flame symbolize repair repair-cut; do
    f="$out/pt101.json"
    [ $c = repair-cut ] && c=repair f="$out/pt101cut.json"
    rm -f "$out/pt101.out"
    expect 1 "$c of a 1.0.1 trace" -- "$etr" $c "$f" -o "$out/pt101.out" &&
      one_line_error "$c 1.0.1" "$f" && err_has "$c 1.0.1" 'schema "1.0.1"'
    [ ! -e "$out/pt101.out" ] || fail "$c of a 1.0.1 trace: wrote its output"
  done
  if "$etr" chakra --help > /dev/null 2>&1; then
    expect 1 "chakra of a 1.0.1 trace" -- "$etr" chakra "$out/pt101.json" -o "$out/pt101-et" &&
      one_line_error "chakra 1.0.1" "$out/pt101.json" && err_has "chakra 1.0.1" 'schema "1.0.1"'
  fi
  expect 1 "validate of a 1.0.1 trace" -- "$etr" validate "$out/pt101.json" &&
    one_line_error "validate 1.0.1" "$out/pt101.json" && err_has "validate 1.0.1" 'schema "1.0.1"'
  [ "$(grep -c 'errors\|INVALID' "$out/last.out")" -eq 0 ] ||
    { fail "validate 1.0.1: errors listed"; cat "$out/last.out"; }
  printf '' > "$out/empty.json"
  expect 1 "empty file" -- "$etr" summary "$out/empty.json" && one_line_error empty "$out/empty.json"
  printf '[1,2,3]' > "$out/array.json"
  expect 1 "not an object" -- "$etr" validate "$out/array.json" && err_has array "not a JSON object"
  printf '\037\213garbage' > "$out/garbage.gz"
  expect 1 "bad gzip" -- "$etr" summary "$out/garbage.gz" && one_line_error "bad gzip" "$out/garbage.gz"
  expect 1 "missing file" -- "$etr" validate "$out/nope.json" && one_line_error nope "$out/nope.json"
  expect 1 "directory" -- "$etr" summary "$out" && err_has dir "directory"
  expect 1 "summary -o into a missing dir" -- "$etr" summary -o "$out/no/such/dir/x" "$t" &&
    err_has "-o" "cannot create"

  # rules of docs/FORMAT.md broken one at a time: validate lists them (exit 1)
  rule dup_id "already used by the node at byte" 'nodes.insert(1, dict(nodes[0]))'
  rule no_parent "parent 987654 (ctrl_deps) does not exist" 'ops[0]["ctrl_deps"] = 987654'
  rule forbidden_attr 'attr named "stream"' 'ops[0]["attrs"].append({"name": "stream", "type": "uint64", "value": 1})'
  rule tensor_list "is not \[id, storage, offset, numel, itemsize" 'ops[0]["outputs"]["values"][0] = ops[0]["outputs"]["values"][0][:5]'
  rule key_order 'key "id" out of order' 'nodes[0] = dict([("name", nodes[0]["name"])] + [(k, v) for k, v in nodes[0].items() if k != "name"])'
  rule missing_attr 'missing base attr "rf_id"' 'ops[0]["attrs"].pop(0)'
  rule attr_order 'out of order (rf_id .. kernel_file' 'a = ops[0]["attrs"]; a[0], a[1] = a[1], a[0]'
  rule int64 "does not fit int64" 'attr(ops[0], "rf_id")["value"] = 18446744073709551615'
  rule attr_type 'has type "int64", not "uint64"' 'attr(ops[0], "tid")["type"] = "int64"'
  rule cycle "has a cycle" 'ops[0]["ctrl_deps"] = ops[1]["id"]; ops[1]["ctrl_deps"] = ops[0]["id"]'
  rule no_process "no process node" 'd["nodes"] = [n for n in nodes if n["id"] != 1]'
  rule tb_table 'no "tracebacks" table' 'ops[0]["attrs"].append({"name": "traceback", "type": "uint64", "value": 3})'
  rule tb_index 'beyond the "tracebacks" table' 'ops[0]["attrs"].append({"name": "traceback", "type": "uint64", "value": 3}); d["frames"] = [{"name": "f", "filename": "a.c", "line": 1}]; d["tracebacks"] = [[0]]'
  rule frames "is not an index into \"frames\"" 'd["frames"] = []; d["tracebacks"] = [[0]]'
  rule durations "want 0 <= exclusive <= inclusive" 'ops[0]["exclusive_dur"] = ops[0]["inclusive_dur"] + 5'
  rule timing_partial "must all be integers" 'del ops[0]["exclusive_dur"]'
  rule tid "hangs under the thread node" 'attr(ops[0], "tid")["value"] = 9'
  rule thread_parent "thread node with ctrl_deps" 'next(n for n in nodes if n["name"].endswith("thread]"))["ctrl_deps"] = 2'
  rule top_order 'top-level key "pid" out of order' 'p = d.pop("pid"); d2 = dict(d); d.clear(); d["schema"] = d2.pop("schema"); d["time"] = d2.pop("time"); d["pid"] = p; d.update(d2)'
  rule io_key 'key "shapes" out of order' 'io = ops[0]["inputs"]; sh = io.pop("shapes"); io["shapes"] = sh'
  rule double 'a Double value is not a number' 'k = next(n for n in ops if n["name"] == "misc::kinds"); k["inputs"]["values"][2] = "notanumber"'
  rule bool 'a Bool value is not true/false' 'e = ops[0]; e["inputs"]["values"][3] = 1'
  rule footer 'stat "threads" is not an integer' 'd["etr"]["stats"]["threads"] = "x"'
  rule int_value 'an Int value is not an integer within int64' 'k = next(n for n in ops if n["name"] == "misc::kinds"); k["inputs"]["values"][0] = 2**63'
  rule types_len '"types" has 5 entries, "values" 4' 'ops[0]["inputs"]["types"].append("Int")'
  rule scalar_strides 'the strides of a Int are not \[\]' 'k = next(n for n in ops if n["name"] == "misc::kinds"); k["inputs"]["strides"][0] = [1]'
  rule list_strides 'the strides of a list do not nest' 'ops[0]["inputs"]["strides"][0] = "x"'
  rule not_array '"shapes" is not an array' 'ops[0]["outputs"]["shapes"] = 1'
  # random structural mutations of the golden file (seeded): any verdict, but exit 0 or 1,
  # no sanitizer report, valid JSON from summary --json; most must be found invalid
  mkdir -p "$out/mut"
  python3 - "$golden" "$out/mut" <<'EOF'
import json, random, sys
random.seed(11)
d0 = json.load(open(sys.argv[1]))
vals = [None, True, False, 0, -1, 2**63, 2**64 + 5, -2**63 - 1, 1.5, "", "x", "Tensor(float)",
        "GenericList[Int,Int]", "Tuple[", [], [1], [1, 2, 3, 4, 5, 6], [[1, 2], [3]], {},
        {"a": 1}, [0, 0, 0, 0, 0, ""], "<None>", "nan"]
def paths(x, p=()):
    yield p
    if isinstance(x, dict):
        for k, v in x.items(): yield from paths(v, p + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x): yield from paths(v, p + (i,))
allp = [p for p in paths(d0) if p]
for i in range(60):
    d = json.loads(json.dumps(d0))
    for _ in range(random.randint(1, 3)):
        p = random.choice(allp)
        try:
            t = d
            for k in p[:-1]: t = t[k]
            r = random.random()
            if r < 0.7: t[p[-1]] = random.choice(vals)
            elif isinstance(t, dict): del t[p[-1]]
            else: t.insert(p[-1], random.choice(vals))
        except (KeyError, IndexError, TypeError):
            pass
    json.dump(d, open("%s/m%02d.json" % (sys.argv[2], i), "w"))
EOF
  invalid=0
  for m in "$out"/mut/m*.json; do
    for c in validate "summary --json"; do
      set +e
      "$etr" $c "$m" > "$out/last.out" 2> "$out/last.err"
      rc=$?
      set -e
      [ $rc -le 1 ] || fail "$c $m: exit $rc"
      ! grep -q -E "Sanitizer|runtime error" "$out/last.err" || { fail "$c $m: sanitizer report"; head -5 "$out/last.err"; }
      if [ "$c" = validate ] && [ $rc -eq 1 ]; then invalid=$((invalid + 1)); fi
      if [ "$c" != validate ] && [ $rc -eq 0 ]; then
        python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$out/last.out" || fail "summary --json of $m is not JSON"
      fi
    done
  done
  [ $invalid -ge 40 ] || fail "validate found only $invalid of 60 mutated files invalid"

  # a warning (real-trace quirk) passes, and fails under --strict
  mutate short_strides 'ops[0]["inputs"]["strides"].pop()'
  expect 0 "short strides: warning" -- "$etr" validate "$out/short_strides.json" &&
    out_has strides 'warning: inputs: "strides" has 3 entries, "values" 4'
  expect 1 "short strides --strict" -- "$etr" validate --strict "$out/short_strides.json"
  # --max caps each kind; --quiet prints the verdict only
  mutate many 'for n in ops: n["ctrl_deps"] = 5555'
  expect 1 "--max 2" -- "$etr" validate --max 2 "$out/many.json" && {
    c=$(grep -c "does not exist" "$out/last.out" || true)
    [ "$c" -eq 2 ] || fail "--max 2 listed $c"
    out_has max "more errors about parents"
  }
  expect 1 "--quiet" -- "$etr" validate --quiet "$out/many.json" && {
    [ "$(wc -l < "$out/last.out")" -eq 1 ] || fail "--quiet printed more than the verdict"
  }
  # op names holding NULs ("\u0000"): summary keeps them whole and apart (it once cut them at
  # the NUL, merged names that differ after it and read past its copy: fuzz_commands)
  mutate nul_names 'ops[0]["name"] = ops[1]["name"] = "a\x00b"; ops[2]["name"] = "a\x00c"'
  expect 0 "names with NULs" -- "$etr" summary --json --top 1000 "$out/nul_names.json" &&
    json_check "names with NULs" "[(o['name'], o['count']) for o in d['ops_by_count'] if '\\x00' in o['name']] == [('a\x00b', 2), ('a\x00c', 1)]"
}

case "$part" in
  ours) part_ours ;;
  real) part_real ;;
  bad) part_bad ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all $part checks passed"
