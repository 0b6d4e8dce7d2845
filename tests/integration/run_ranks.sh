#!/bin/sh
# The example runtime as 2 ranks (2 processes exchanging their collectives), each recording
# its own trace through ETR_TRACE=.../rank-%r.json; then both traces are checked alone
# (check_example_trace.py --rank/--world), against each other as PARAM's comm replay reads
# them (check_ranks.py), and read together by `etr summary` and `etr replay`.
# Usage: run_ranks.sh EXAMPLE ETR CHECKER CHECK_RANKS OUTDIR
set -eu
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
