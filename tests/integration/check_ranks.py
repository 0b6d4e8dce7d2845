#!/usr/bin/env python3
"""Check the traces of one run of several ranks against each other, as PARAM's comm replay
reads them (et_replay/comm/commsTraceParser.py), with our own code:

    check_ranks.py rank-0.json rank-1.json ...   (file i is rank i)

Per trace: a `## process_group:init ##` node whose one String input is a JSON list of groups
with pg_name, pg_desc, backend_config, ranks, group_size, group_count (docs/FORMAT.md) and
our "rank" key naming this trace's rank; every collective's process group is in that list
(PARAM looks it up by number: KeyError otherwise); record_param_comms inputs in PyTorch's
order (tensors, seq, (pg_name, pg_desc), rank, collective, splits, rank start, stride, size)
agreeing with the attrs. Across traces: the same collectives, in the same order, with the
same sizes, and the sequence numbers 0, 1, 2, ... of each group.
"""
import json
import sys

PG_INIT = "## process_group:init ##"
KEYS = ("pg_name", "pg_desc", "backend_config", "ranks", "group_size", "group_count")


def attrs(n):
    return {a["name"]: a["value"] for a in n.get("attrs", [])}


def check(path, rank, world, problems):
    def fail(msg):
        problems.append("%s: %s" % (path, msg))

    with open(path) as f:
        doc = json.load(f)
    nodes = sorted(doc["nodes"], key=lambda n: n["id"])
    # (PARAM reads the first in file order, and only that one)
    pg_nodes = [n for n in doc["nodes"] if "process_group:init" in n["name"]]
    if not pg_nodes:
        fail("no process_group:init node (PARAM's comm replay fails with KeyError)")
        return None
    groups = {}
    first = pg_nodes[0]
    # The writer places them before the first collective, newest first (docs/FORMAT.md):
    # they reached it after the collectives of other threads, and the stale one came first.
    at = {id(n): i for i, n in enumerate(doc["nodes"])}
    colls_at = [at[id(n)] for n in doc["nodes"] if n["name"] == "record_param_comms"]
    if colls_at and at[id(first)] > colls_at[0]:
        fail("the first process_group:init node (file position %d) comes after the first "
             "collective (%d)" % (at[id(first)], colls_at[0]))
    newest = max(pg_nodes, key=lambda n: n["id"])
    if first["inputs"]["values"] != newest["inputs"]["values"]:
        fail("the first process_group:init node in the file (id %d) is not the newest (id %d): "
             "%r" % (first["id"], newest["id"], first["inputs"]["values"]))
    if first["name"] != PG_INIT or first["inputs"]["types"] != ["String"]:
        fail("node %d: %r with inputs %r" % (first["id"], first["name"], first["inputs"]["types"]))
        return None
    try:
        lst = json.loads(first["inputs"]["values"][0])
    except ValueError as e:
        fail("node %d: input is not JSON: %s" % (first["id"], e))
        return None
    for g in lst:
        missing = [k for k in KEYS if k not in g]
        if missing:
            fail("group %r lacks %r" % (g, missing))
            continue
        if not g["pg_name"].isdecimal():
            fail("group name %r is not a number (PARAM skips it)" % g["pg_name"])
        groups[g["pg_name"]] = g
    if "0" not in groups:
        fail("no group \"0\" in %r" % lst)
        return None
    g0 = groups["0"]
    if g0.get("rank") != rank or g0["group_size"] != world or g0["group_count"] != len(lst):
        fail("group 0 is %r: expected rank %d, group_size %d, group_count %d" % (g0, rank, world, len(lst)))
    colls = []
    for n in nodes:
        if n["name"] != "record_param_comms":
            continue
        a, v, t = attrs(n), n["inputs"]["values"], n["inputs"]["types"]
        where = "node %d" % n["id"]
        if a.get("pg_name") not in groups:
            fail("%s: process group %r is not in the process_group:init node" % (where, a.get("pg_name")))
        # (one Tensor for all_to_allv, as PyTorch's alltoall_base records it: PARAM's et_replay
        # builds the replayed collective's buffers from it, and fails on a list)
        first = "Tensor(float)" if a.get("collective_name") == "all_to_allv" else "GenericList[Tensor(float)]"
        if len(v) != 10 or t[0] != first or t[2] != "Tuple[String,String]":
            fail("%s: inputs %r are not in record_param_comms order" % (where, t))
            continue
        if n["outputs"]["types"][:1] != [first]:
            fail("%s: outputs %r, expected %s" % (where, n["outputs"]["types"], first))
        if (v[2] != [a.get("pg_name"), a.get("pg_desc")] or v[3] != rank or v[4] != a.get("collective_name")
                or v[7] != a.get("global_rank_start") or v[8] != a.get("global_rank_stride")
                or v[9] != a.get("pg_size") or a.get("pg_size") != world):
            fail("%s: inputs %r disagree with attrs %r" % (where, v, a))
        colls.append((a.get("pg_name"), v[1], a.get("collective_name"), a.get("dtype"),
                      a.get("in_msg_nelems"), a.get("out_msg_nelems"), a.get("in_split_size"),
                      a.get("out_split_size")))
    if not colls:
        fail("no collectives")
    by_pg = {}
    for c in colls:
        by_pg.setdefault(c[0], []).append(c[1])
    for pg, seqs in by_pg.items():
        if seqs != list(range(len(seqs))):
            fail("process group %r: sequence numbers %r, expected 0, 1, ..." % (pg, seqs))
    return colls


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems = []
    per_rank = [check(p, r, len(argv), problems) for r, p in enumerate(argv)]
    if all(c is not None for c in per_rank):
        for r in range(1, len(per_rank)):
            if per_rank[r] != per_rank[0]:
                problems.append("rank %d's collectives differ from rank 0's:\n  %r\n  %r" % (r, per_rank[r][:4], per_rank[0][:4]))
    if problems:
        print("check_ranks: FAILED:\n  " + "\n  ".join(problems))
        return 1
    print("check_ranks: OK: %d ranks, %d collectives each, same order and sizes" % (len(argv), len(per_rank[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
