#!/usr/bin/env python3
"""etr summary and etr replay (one rank and several) count the collectives of traces as
PyTorch's recorders leave them (tests/pylib/coll_traces.py) the way etr chakra does: one per
call, whichever records the call left (record_param_comms, c10d::X, gloo:X / nccl:X); and
they say so when the traces hold none instead of reporting 0% communication.

Usage: test_collectives.py ETR WORKDIR
Exit status: 0 pass, 1 fail.
"""
import csv
import json
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "pylib"))
import coll_traces as ct  # noqa: E402
from etr_checks import check, finish  # noqa: E402

etr, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)


def run(*args):
    p = subprocess.run([etr] + list(args), capture_output=True, text=True,
                       env=dict(os.environ, ETR_PROGRESS="0"))
    check(p.returncode == 0, "etr %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p.stdout, p.stderr


def traces(name, ranks=2):
    files = []
    for r in range(ranks):
        f = os.path.join(work, "%s-%d.json" % (name, r))
        ct.write(f, ct.SCENARIOS[name](r))
        files.append(f)
    return files


def summary(path):
    out, _ = run("summary", "--json", path)
    d = json.loads(out)
    return {(c["pg_name"], c["collective"]): (c["count"], c["in_bytes"], c["out_bytes"])
            for c in d["collectives"]}


# One rank: one entry per call, sized as chakra sizes them.
g = traces("gloo113")
got = summary(g[0])
want = {(None, "all_reduce"): (1, 4000, 4000), (None, "all_gather"): (1, 400, 800),
        (None, "broadcast"): (1, 4000, 4000), (None, "barrier"): (1, 0, 0)}
check(got == want, "summary gloo113: %s, wanted %s" % (got, want))
got = summary(traces("a2a113", 1)[0])
check(got == {(None, "all_to_all"): (1, 1024, 0)}, "summary a2a113: %s" % got)
got = summary(traces("pt2", 1)[0])
check(got == {("0", "allreduce"): (1, 4000, 4000), (None, "wait"): (1, 0, 0)},
      "summary pt2: %s" % got)
got = summary(traces("ptobs", 1)[0])
check(got == {(None, "all_reduce"): (1, 40, 40), (None, "broadcast"): (1, 40, 40)},
      "summary ptobs: %s" % got)
got = summary(traces("ddp113", 1)[0])
check(got == {(None, "all_reduce"): (2, 384, 384)}, "summary ddp113: %s" % got)
got = summary(traces("c10d_sizes", 1)[0])
check(got.get((None, "send")) == (1, 8, 8) and got.get((None, "recv")) == (1, 16, 16) and
      got.get((None, "reduce_scatter")) == (1, 200, 100), "summary c10d_sizes: %s" % got)
text, _ = run("summary", g[0])
check(re.search(r"^collectives: 4 kinds$", text, re.M) and
      re.search(r"^  -\s+all_gather\s+1\s+400\s+800$", text, re.M),
      "summary text of gloo113: %s" % text[text.find("collectives"):])

# Several ranks: the calls matched, their time measured (the call's span: c10d op start to
# gloo record end), the wire bytes over the 2 ranks given.
out, _ = run("summary", "--json", g[0], g[1])
d = json.loads(out)
check(d["matched"] == 4 and d["unmatched"] == 0 and d["mismatch"] is None,
      "summary of 2 gloo113 ranks: %s" % {k: d[k] for k in ("matched", "unmatched", "mismatch")})
check([r["collectives"] for r in d["ranks"]] == [4, 4], "summary ranks: %s" % d["ranks"])
check(all(r["comm_us"] == 902 + 402 + 301 + 201 for r in d["ranks"]),
      "summary comm_us %s, wanted the calls' spans 1806" % [r["comm_us"] for r in d["ranks"]])
check([(c["collective"], c["bytes"]) for c in d["collectives"]] ==
      [("all_reduce", 4000), ("all_gather", 400), ("broadcast", 4000), ("barrier", 0)],
      "summary collectives: %s" % d["collectives"])
out, _ = run("replay", "--alpha-us", "5", "--beta-gbps", "1", g[0], g[1])
check("4 collectives matched across ranks in 1 process group(s)" in out,
      "replay of 2 gloo113 ranks: %s" % out)
check(re.search(r"^\s+0 -\s+all_reduce\s+4000 .* 9\.0 ", out, re.M),
      "replay: all_reduce not 5 + 4000 bytes / 1 GB/s = 9 us: %s" % out)
for name in ("pt2", "ptobs", "ddp113", "a2a113"):
    f = traces(name)
    out, _ = run("replay", f[0], f[1])
    n = {"pt2": 2, "ptobs": 2, "ddp113": 2, "a2a113": 1}[name]
    check("%d collectives matched" % n in out, "replay of 2 %s ranks: %s" % (name, out))

# Point-to-point between two of three ranks: the all-reduces still line up on every rank
# (before: the send and the recv were group "0" collectives, summary paired rank 0's send
# with rank 2's second all-reduce and replay refused the run).
f = traces("p2p", 3)
out, _ = run("summary", "--json", *f)
d = json.loads(out)
check(d["matched"] == 2 and d["mismatch"] is None,
      "summary of 3 p2p ranks: %s" % {k: d[k] for k in ("matched", "unmatched", "mismatch")})
out, _ = run("replay", *f)
check("2 collectives matched" in out, "replay of 3 p2p ranks: %s" % out)

# One rank's replay under a network model: each call costs the link once, on its counted
# record; the gloo records cost nothing more; the group size is unknown: latency only.
c = os.path.join(work, "gloo113.csv")
out, _ = run("replay", "--alpha-us", "5", "--beta-gbps", "1", "--csv", c, g[0])
check("4 collective call(s), 4 of unknown group size" in out, "replay of one rank: %s" % out)
cost = {int(r["id"]): float(r["cost_us"]) for r in csv.DictReader(open(c))}
check([cost[i] for i in (4, 8, 13, 16)] == [5.0] * 4 and
      [cost[i] for i in (5, 10, 14, 17)] == [0.0] * 4,
      "replay costs of the c10d ops and their gloo records: %s" % cost)

# No collective at all: said, not reported as 0% communication.
plain = os.path.join(work, "plain.json")
ct.write(plain, [ct.thread(2, 1), ct.node(3, "aten::mm", 2, 1, 10, 5)])
for cmd in ("summary", "replay"):
    out, _ = run(cmd, plain, plain)
    check("note: no collective in these traces" in out, "%s without collectives: %s" % (cmd, out))
out, _ = run("summary", g[0], g[1])
check("no collective" not in out, "summary of gloo113 says there is no collective")

sys.exit(finish("collectives in summary and replay: OK"))
