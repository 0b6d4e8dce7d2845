#!/usr/bin/env python3
"""etr chrome's state across nodes (ctest cli.chrome_flows): the flow arrows of untimed ops
that wait for a fw_parent written later, and the parents whose children were read but which
are not read themselves yet. Each case failed before its fix (findings-12 F2, F5).

usage: test_chrome_flows.py ETR WORKDIR

The work and memory are checked through counters that `ETR_CHROME_STATS=1` prints, never
through time: the machine's load does not count.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from etr_checks import PROCESS, THREAD, check, finish  # noqa: E402

ETR, WORK = sys.argv[1:3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

IO = '"inputs":{"values":[],"shapes":[],"types":[]},"outputs":{"values":[],"shapes":[],"types":[]}'
PEND_GEN = 1 << 17  # tools/cmd_chrome.c


def node(i, name, parent, tid, fw_parent=0, timing=None):
    a = '[{"name":"tid","type":"uint64","value":%d}' % tid
    if fw_parent:
        a += (',{"name":"fw_parent","type":"uint64","value":%d},'
              '{"name":"fw_tid","type":"uint64","value":1},'
              '{"name":"scope","type":"uint64","value":1}' % fw_parent)
    t = ""
    if timing is not None:
        t = ',"ts":%d,"inclusive_dur":%d,"exclusive_dur":%d' % timing
    return '{"id":%d,"name":"%s","ctrl_deps":%d,%s%s,"attrs":%s]}' % (i, name, parent, IO, t, a)


def write(name, nodes, threads=(1, 2)):
    """WORK/name: a thread node per tid (id 100 + tid), the nodes, the process node."""
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write('{"schema":"1.1.0-chakra.0.0.4","pid":1,"time":"2026-01-01 00:00:00",'
                '"start_ts":0,"nodes":[')
        f.write(",".join('{"id":%d,"name":"%s","ctrl_deps":1,%s,"attrs":[{"name":"tid",'
                         '"type":"uint64","value":%d}]}' % (100 + t, THREAD, IO, t)
                         for t in threads))
        for n in nodes:
            f.write(",")
            f.write(n)
        f.write(',{"id":1,"name":"%s","ctrl_deps":1,%s,"attrs":[]}],"finish_ts":1}' %
                (PROCESS, IO))
    return path


def run(args):
    env = dict(os.environ, ETR_PROGRESS="0", ETR_CHROME_STATS="1")
    return subprocess.run([ETR, *args], capture_output=True, timeout=600, env=env)


def stats(r):
    """The counters of the stats line, or {}."""
    for line in r.stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("etr chrome: stats: "):
            w = line[len("etr chrome: stats: "):].split()
            return {w[i]: int(w[i + 1]) for i in range(0, len(w) - 1, 2)}
    check(False, "no stats line in %r" % r.stderr[-400:])
    return {}


def ran(r, what):
    return check(r.returncode == 0, "%s: exit %d: %s" %
                 (what, r.returncode, r.stderr[-400:].decode("utf-8", "replace")))


def flows_many_waiting():
    """Untimed backward ops written before their fw_parent, as in PyTorch's own traces:
    3,000 of them waiting for 60 forward ops that come one by one amid them (interleaved, up
    to ~150 flows per forward op), some for a forward op that never comes, some for the
    thread node, with timed forward ops among the untimed ones. Each flow whose fw_parent
    comes later is drawn once, from the fw_parent's slice ("s" at its start, on its thread)
    to the backward op's ("f"), in the order the array scan before the fix wrote them (the
    output is byte for byte what it was), the others said to be left out; and the flows the
    index looked at are at most twice the flows that waited. Before: every op laid out
    looked at every flow waiting (here ~3,000 x 1,500; 1 M such ops took 295 s)."""
    fw_ids = [10000 + k for k in range(60)]
    nodes, order = [], []  # order: (kind, id, fw_parent) in file order
    nid = 20000
    fw_next = 0
    for i in range(3000):
        k = (i * 7) % 60
        fwp = fw_ids[k]
        if i % 97 == 0:
            fwp = 10 ** 12 + i % 5  # never comes
        elif i % 131 == 0:
            fwp = 101  # the forward thread's node (read already)
        nodes.append(node(nid, "MmBackward0", 102, 2, fw_parent=fwp))
        order.append(("b", nid, fwp))
        nid += 1
        if i % 50 == 49 and fw_next < 60:  # a forward op read amid the backward ones
            timing = (10 + fw_next, 1, 1) if fw_next % 3 == 0 else None
            nodes.append(node(fw_ids[fw_next], "aten::mm", 101, 1, timing=timing))
            order.append(("f", fw_ids[fw_next], 0))
            fw_next += 1
    path = write("flows.json", nodes)
    r = run(["chrome", path])
    if not ran(r, "chrome of interleaved waiting flows"):
        return
    d = json.loads(r.stdout)
    ev = d["traceEvents"]
    xs = {e["args"]["id"]: e for e in ev if e["ph"] == "X"}
    got = [(e["ph"], e["id"], e["tid"], e["ts"]) for e in ev if e["ph"] in ("s", "f")]
    # The scan before the fix: the waiting flows in an array; for each op read, from the
    # front, each flow waiting for it written and the last flow moved into its place.
    waiting, want = [], []
    for kind, i, fwp in order:
        if kind == "f":
            j = 0
            while j < len(waiting):
                if waiting[j][1] == i:
                    b = waiting[j][0]
                    want += [("s", b, xs[i]["tid"], xs[i]["ts"]), ("f", b, 2, xs[b]["ts"])]
                    waiting[j] = waiting[-1]
                    waiting.pop()
                else:
                    j += 1
        else:
            waiting.append((i, fwp))
    check(len(want) > 2000, "the case has flows: %d" % len(want))
    check(got == want, "flows: %d events, want %d; first difference at %r" %
          (len(got), len(want), next((k for k in range(min(len(got), len(want)))
                                      if got[k] != want[k]), None)))
    left = len(waiting)
    check(("%d fw_parent flow(s) left out" % left).encode() in r.stderr,
          "the note says %d flows left out: %r" % (left, r.stderr[-300:]))
    s = stats(r)
    if s:
        check(s["flows_waited"] == 3000, "flows waited: %r" % s)
        check(s["flow_visits"] <= 2 * s["flows_waited"], "flows looked at: %r" % s)


def flows_one_parent_last():
    """gen.py bwd --no-timing: 20,000 untimed backward ops all waiting for the forward op
    written after them, with 20,000 other untimed ops laid out while they wait. Each flow is
    looked at a bounded number of times (before: once per op laid out, 8 x 10^8 here), and
    the flows come out in the old order (the first, then the last back to the second)."""
    n = 20000
    nodes = [node(30000 + i, "MmBackward0", 102, 2, fw_parent=10) for i in range(n)]
    nodes += [node(60000 + i, "aten::add", 102, 2) for i in range(n)]
    nodes.append(node(10, "aten::backward", 101, 1))
    r = run(["chrome", "--no-args", write("one-parent.json", nodes)])
    if not ran(r, "chrome of 20,000 flows waiting for one op"):
        return
    ev = json.loads(r.stdout)["traceEvents"]
    ids = [e["id"] for e in ev if e["ph"] == "f"]
    check(ids == [30000] + list(range(30000 + n - 1, 30000, -1)), "flow order: %r ..." % ids[:4])
    s = stats(r)
    if s:
        check(s["flows_waited"] == n and s["flow_visits"] <= 2 * n, "flows looked at: %r" % s)


def pending_bounded():
    """An invalid trace whose 280,000 untimed ops each name a parent that never comes
    (gen.py flat --dangling): the entries chrome keeps for parents not read yet stay under
    2 x 131,072 (before: one per op, 120 MB at 1 M ops, 455 MB at 5 M), the output still has
    every op, and one warning says that parents were forgotten."""
    n = 280000
    nodes = [node(1000 + i, "aten::mm", 10 ** 15 + i, 1 + i % 4) for i in range(n)]
    path = write("dangling.json", nodes, threads=(1, 2, 3, 4))
    r = run(["chrome", "--no-args", "--no-flows", path])
    if not ran(r, "chrome of ops whose parents never come"):
        return
    check(r.stdout.count(b'"ph":"X"') == n, "every op in the output")
    err = r.stderr.decode("utf-8", "replace")
    warn = [ln for ln in err.splitlines() if "forgotten" in ln and "warning" in ln]
    check(len(warn) == 1 and "more than 131072 parents" in warn[0],
          "one warning about forgotten parents: %r" % err[-500:])
    s = stats(r)
    if s:
        check(0 < s["pending_synth_most"] <= 2 * PEND_GEN, "parents kept: %r" % s)
        check(s["pending_forgotten"] >= n - 2 * PEND_GEN, "parents forgotten: %r" % s)


def pending_long_lived():
    """A valid trace with few parents pending at once but many in all: a parent whose first
    child comes first and whose last child and itself come after 540,000 other ops (each a
    child and its parent: more than 2 x 131,072 entries made in all). Nothing is forgotten (no warning), and the parent's slice starts
    at its first child's, as the untimed layout says. A bound on the entries ever made
    instead of those held at once would lose it."""
    nodes = [node(5, "first_child", 4, 1)]
    for i in range(270000):
        nodes.append(node(1000 + 2 * i, "child", 1001 + 2 * i, 1))
        nodes.append(node(1001 + 2 * i, "parent", 4, 1))
    nodes += [node(6, "last_child", 4, 1), node(4, "long_parent", 101, 1)]
    r = run(["chrome", "--no-args", write("long-lived.json", nodes, threads=(1,))])
    if not ran(r, "chrome of a long-lived parent"):
        return
    check(b"warning" not in r.stderr, "no warning: %r" % r.stderr[-300:])
    xs = {e["name"]: e for e in json.loads(r.stdout)["traceEvents"]
          if e["ph"] == "X" and e["name"] in ("first_child", "last_child", "long_parent")}
    check(len(xs) == 3 and xs["long_parent"]["ts"] == xs["first_child"]["ts"] == 0 and
          xs["long_parent"]["ts"] + xs["long_parent"]["dur"] >=
          xs["last_child"]["ts"] + xs["last_child"]["dur"],
          "the parent spans its children: %r" % xs)
    s = stats(r)
    if s:
        check(s["pending_forgotten"] == 0 and s["pending_synth_most"] <= 3, "kept: %r" % s)


for case in (flows_many_waiting, flows_one_parent_last, pending_bounded, pending_long_lived):
    try:
        case()
    except Exception as e:  # noqa: BLE001 (a case that crashes is a failure, not the end)
        check(False, "%s raised %r" % (case.__name__, e))
sys.exit(finish("cli.chrome_flows: passed"))
