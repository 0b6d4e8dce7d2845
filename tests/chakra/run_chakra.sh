#!/bin/sh
# etr chakra end to end: the example runtime as 2 ranks, both traces converted to rank.0.et
# and rank.1.et, decoded by check_et (protobuf-c): COMM_COLL nodes of the right type and
# size, the same collectives on both ranks, timed COMP nodes, nodes with two or more data
# deps through tensors, a METADATA node declaring the groups, every dependency resolving.
# Then the real PyTorch traces of ../shared/traces/real/ when that folder is present.
# Usage: run_chakra.sh EXAMPLE ETR CHECK_ET OUTDIR [REAL_TRACES_DIR]
set -eu
example=$1 etr=$2 check=$3 out=$4 real=${5:-}
rm -rf "$out"
mkdir -p "$out/ranks"
fail() { echo "FAIL: $*"; exit 1; }

ETR_TRACE="$out/ranks/rank-%r.json" "$example" --ranks 2 --iters 3 > "$out/run.log" 2>&1 ||
  { cat "$out/run.log"; fail "the example failed as 2 ranks"; }
# Given in reverse order: the rank comes from each trace, not from the argument's position.
"$etr" chakra "$out/ranks/rank-1.json" "$out/ranks/rank-0.json" -o "$out/et" || fail "etr chakra"
[ -s "$out/et/rank.0.et" ] && [ -s "$out/et/rank.1.et" ] || fail "no rank.0.et / rank.1.et"
# 3 iterations x (allreduce + all-to-all) per rank.
"$check" --min-coll 6 --min-timed 1 --min-2deps 2 --metadata --same-colls \
  "$out/et/rank.0.et" "$out/et/rank.1.et" || fail "check_et on the example's ranks"

# --prefix and --rank; a missing -o and a repeated rank are usage/input errors.
"$etr" chakra "$out/ranks/rank-0.json" -o "$out/et2" --prefix wl --rank 5 > /dev/null || fail "--prefix --rank"
[ -s "$out/et2/wl.5.et" ] || fail "--prefix wl --rank 5 did not write wl.5.et"
if "$etr" chakra "$out/ranks/rank-0.json" 2> /dev/null; then fail "no -o accepted"; fi
if "$etr" chakra "$out/ranks/rank-0.json" "$out/ranks/rank-0.json" -o "$out/et3" 2> /dev/null; then
  fail "the same rank twice accepted"
fi

if [ -n "$real" ] && [ -d "$real" ]; then
  for f in "$real"/*.json "$real"/*.json.gz; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    rm -rf "$out/real"
    "$etr" chakra "$f" -o "$out/real" > /dev/null || fail "etr chakra $name"
    case "$name" in
    chakra_*) "$check" --min-coll 10 --metadata "$out/real/rank.0.et" ;;   # 10 all_gather
    param_resnet_*) "$check" --min-coll 21 --metadata --min-2deps 100 "$out/real/rank.0.et" ;; # 15 allreduce + 6 broadcast
    *) "$check" "$out/real/rank.0.et" ;;
    esac || fail "check_et on $name"
  done
else
  echo "real traces not present: skipped"
fi
echo "chakra: OK"
