#!/bin/sh
# The example runtime as 2 ranks (2 processes exchanging their collectives), each recording
# its own trace through ETR_TRACE=.../rank-%r.json; then both traces are checked alone
# (check_example_trace.py --rank/--world), against each other as PARAM's comm replay reads
# them (check_ranks.py), and read together by `etr summary` and `etr replay`.
# Usage: run_ranks.sh EXAMPLE ETR CHECKER CHECK_RANKS OUTDIR
set -eu
# (the Python CMake found, when ctest says which: a version manager's `python3` on PATH can
# be a shim costing ~0.1 s a start, and this script starts Python many times)
python3() { command "${ETR_PYTHON:-python3}" "$@"; }
example=$1 etr=$2 checker=$3 check_ranks=$4 out=$5
iters=2
mkdir -p "$out"
rm -f "$out"/rank-*.json "$out"/out-rank-*.json "$out"/summary.* "$out"/replay.*
fail() { echo "FAIL: $*"; exit 1; }

ETR_TRACE="$out/rank-%r.json" "$example" --ranks 2 --iters $iters > "$out/run.log" 2>&1 ||
  { cat "$out/run.log"; fail "the example failed as 2 ranks"; }
[ -s "$out/rank-0.json" ] && [ -s "$out/rank-1.json" ] || fail "no rank-0.json / rank-1.json"
# Both ranks agree on the mean loss: the allreduce and all-to-all really exchanged data.
m0=$(sed -n 's/^rank 0: .*mean over ranks \([0-9.]*\).*/\1/p' "$out/run.log")
m1=$(sed -n 's/^rank 1: .*mean over ranks \([0-9.]*\).*/\1/p' "$out/run.log")
[ -n "$m0" ] && [ "$m0" = "$m1" ] || { cat "$out/run.log"; fail "ranks disagree on the mean loss: '$m0' vs '$m1'"; }
for r in 0 1; do
  python3 "$checker" "$out/rank-$r.json" --rank $r --world 2 --iters $iters || fail "rank $r trace"
done
python3 "$check_ranks" "$out/rank-0.json" "$out/rank-1.json" || fail "check_ranks"

# The same through --out with %r (the program opens the trace itself).
"$example" --ranks 2 --iters $iters --out "$out/out-rank-%r.json" > "$out/run-out.log" 2>&1 ||
  { cat "$out/run-out.log"; fail "the example failed as 2 ranks with --out"; }
python3 "$check_ranks" "$out/out-rank-0.json" "$out/out-rank-1.json" || fail "check_ranks (--out)"

# With %p the launcher's own trace is removed (2 files, the ranks'); a path naming no rank
# is refused rather than written by every rank at once.
rm -f "$out"/pid-*.json "$out"/same.json
ETR_TRACE="$out/pid-%p.json" "$example" --ranks 2 --iters 1 > /dev/null 2>&1 || fail "ETR_TRACE with %p"
set -- "$out"/pid-*.json
[ "$#" -eq 2 ] || fail "ETR_TRACE with %p made $# files, not 2: $*"
if ETR_TRACE="$out/same.json" "$example" --ranks 2 --iters 1 > /dev/null 2>&1; then
  fail "ETR_TRACE naming one file for 2 ranks was accepted"
fi
[ ! -e "$out/same.json" ] || fail "the refused launcher left $out/same.json"

# etr summary: options after the files, -o, JSON.
"$etr" summary "$out/rank-1.json" "$out/rank-0.json" --json -o "$out/summary.json" --alpha-us 5 \
  --beta-gbps 10 || fail "etr summary of 2 ranks"
python3 - "$out/summary.json" $iters <<'PY' || fail "etr summary --json of 2 ranks"
import json, sys
d = json.load(open(sys.argv[1])); iters = int(sys.argv[2])
assert [r["rank"] for r in d["ranks"]] == [0, 1], d["ranks"]
assert d["rank_source"] == "recorded in each trace", d["rank_source"]
assert d["matched"] == 2 * iters and d["unmatched"] == 0 and d["mismatch"] is None, d
names = [c["collective"] for c in d["collectives"]]
assert names == ["allreduce", "all_to_allv"] * iters, names
for r in d["ranks"]:
    assert r["collectives"] == 2 * iters and 0 <= r["comm_us"] <= r["makespan_us"], r
for c in d["collectives"]:
    assert c["pg_name"] == "0" and c["ranks"] == 2 and c["straggler"] in (0, 1, None), c
    assert c["bytes"] > 0 and abs(c["model_us"] - (5 + c["bytes"] / 1e4)) < 1e-3, c
print("summary --json: OK")
PY
"$etr" summary "$out/rank-0.json" "$out/rank-1.json" > "$out/summary.txt" || fail "etr summary (text)"
grep -q "collectives matched across ranks (process group + order): $((2 * iters))" "$out/summary.txt" ||
  { cat "$out/summary.txt"; fail "summary text lacks the matched collectives"; }

# etr replay of both ranks: recorded network, then the alpha-beta model.
"$etr" replay "$out/rank-0.json" "$out/rank-1.json" > "$out/replay.txt" || fail "etr replay of 2 ranks"
"$etr" replay "$out/rank-0.json" --alpha-us 1000 "$out/rank-1.json" --beta-gbps 0.001 \
  > "$out/replay-model.txt" || fail "etr replay of 2 ranks with a network model"
python3 - "$out/replay.txt" "$out/replay-model.txt" $iters <<'PY' || fail "etr replay output"
import re, sys
def ranks(path):
    text = open(path).read()
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+%", text, re.M)
    assert [int(r[0]) for r in rows] == [0, 1], text
    return text, [(int(r[1]), float(r[3]), float(r[4]), float(r[5])) for r in rows]
iters = int(sys.argv[3])
text, rec = ranks(sys.argv[1])
assert "network: recorded" in text, text
for n, pred, exposed, wait in rec:
    assert n == 2 * iters and 0 <= wait <= exposed <= pred, rec
text, mod = ranks(sys.argv[2])
assert "1000 us + bytes / 0.001 GB/s" in text, text
# 4 collectives of at least 1000 us each: exposed >= 4000 us on every rank.
for n, pred, exposed, wait in mod:
    assert exposed >= 1000 * 2 * iters and pred >= exposed, mod
print("replay: OK")
PY
# Exact numbers on two hand-made rank traces (data/ranks-fixture-*.json; times in us):
#   rank 0: compute 100, allreduce 50, compute 10, allreduce 5   (recorded from ts 1000)
#   rank 1: compute 130, allreduce 20, compute 40, allreduce 5   (recorded from ts 5000:
#   another clock; only durations and gaps count)
# Recorded: rank 1 spent least in the first allreduce (it came last: straggler, rank 0
# waited 30); both spent 5 in the second (no straggler). Replay, recorded network: the first
# starts at 130 and lasts 20 (the shortest), the second at 190 (rank 1 ready at 150 + 40)
# for 5: makespan 195 on both; rank 0 waits 30 + 30 and is exposed 50 + 35. With alpha 10
# us and 1 GB/s: 1000 bytes on the wire per allreduce (250 floats x 2(p-1)/p) = 11 us each.
data=$(dirname "$0")/data
"$etr" summary --json "$data/ranks-fixture-1.json" "$data/ranks-fixture-0.json" > "$out/fixture.json" ||
  fail "etr summary of the fixture"
python3 - "$out/fixture.json" <<'PY' || fail "etr summary numbers on the fixture"
import json, sys
d = json.load(open(sys.argv[1]))
got = [(r["rank"], r["makespan_us"], r["comm_us"], r["straggler_of"], r["others_waited_us"]) for r in d["ranks"]]
assert got == [(0, 165, 55, 0, 0), (1, 195, 25, 1, 30)], got
got = [(c["index"], c["bytes"], c["straggler"], c["transfer_us"], c["wait_max_us"]) for c in d["collectives"]]
assert got == [(0, 1000, 1, 20, 30), (1, 1000, None, 5, 0)], got
print("summary on the fixture: OK")
PY
"$etr" replay "$data/ranks-fixture-0.json" "$data/ranks-fixture-1.json" > "$out/fixture-replay.txt" ||
  fail "etr replay of the fixture"
"$etr" replay --alpha-us 10 --beta-gbps 1 "$data/ranks-fixture-0.json" "$data/ranks-fixture-1.json" \
  > "$out/fixture-model.txt" || fail "etr replay of the fixture with a model"
python3 - "$out/fixture-replay.txt" "$out/fixture-model.txt" <<'PY' || fail "etr replay numbers on the fixture"
import re, sys
def table(path):
    text = open(path).read()
    ranks = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+%\s+(\d+)\s+([\d.]+)$", text, re.M)
    colls = re.findall(r"^\s+(\d+)\s+0\s+allreduce\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)$", text, re.M)
    mk = re.search(r"predicted makespan: ([\d.]+) us", text).group(1)
    return text, float(mk), [tuple(float(x) for x in r) for r in ranks], [tuple(c) for c in colls]
text, mk, ranks, colls = table(sys.argv[1])
assert mk == 195.0, text
# rank, collectives, recorded, predicted, exposed, wait, straggler_of, others_wait
assert ranks == [(0, 2, 165, 195, 85, 60, 0, 0), (1, 2, 195, 195, 25, 0, 2, 60)], ranks
assert colls == [("0", "1000", "130.0", "20.0", "1", "30.0"), ("1", "1000", "190.0", "5.0", "1", "30.0")], colls
text, mk, ranks, colls = table(sys.argv[2])
assert mk == 192.0, text
assert colls == [("0", "1000", "130.0", "11.0", "1", "30.0"), ("1", "1000", "181.0", "11.0", "1", "30.0")], colls
print("replay on the fixture: OK")
PY

# Ranks whose collectives do not match are refused with a reason.
python3 - "$out/rank-1.json" "$out/short.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
last = max(n["id"] for n in d["nodes"] if n["name"] == "record_param_comms")
d["nodes"] = [n for n in d["nodes"] if n["id"] != last]
json.dump(d, open(sys.argv[2], "w"))
PY
if "$etr" replay "$out/rank-0.json" "$out/short.json" > /dev/null 2> "$out/replay-bad.err"; then
  fail "etr replay accepted ranks with different collectives"
fi
grep -q "do not match" "$out/replay-bad.err" || { cat "$out/replay-bad.err"; fail "no reason given"; }
echo "run_ranks: OK"
