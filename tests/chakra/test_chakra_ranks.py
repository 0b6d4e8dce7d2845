#!/usr/bin/env python3
"""etr chakra on small crafted traces (written here, no recording): what findings-17 found.

  pg_order     the `## process_group:init ##` METADATA nodes keep the trace's order (newest
               first, so the first lists every group), not id order (finding 4)
  world        the traces record a world size (group "0"): a rank missing, or traces of runs of
               different sizes, are refused (exit 1, nothing written); traces without a size
               and a single TRACE convert as before (finding 3)
  doubles      Double values in IOInfo keep a '.' or an exponent and their shortest text (1.0,
               -0.1, not 1, -0.10000000000000001) (finding 7)
  dup_msg      a rank that came from the file's position says so in "rank N again", and a run
               that fails prints no per-file note (finding 8)
  stdin_twice  '-' given twice is a usage error (exit 2), not a truncated file (finding 10)
  pg_text      group "0"'s rank read from its group list as JSON ('}' in a string is text)

Usage: test_chakra_ranks.py ETR WORKDIR CASE...   Exit status: 0 pass, 1 fail.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

etr, work = sys.argv[1:3]
cases = sys.argv[3:]
os.makedirs(work, exist_ok=True)
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL: " + msg)
    return cond


E = {"values": [], "shapes": [], "types": []}
A = [{"name": "tid", "type": "uint64", "value": 1}]


def groups(rank, size, sub=False):
    g = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "ranks": [],
          "group_size": size, "group_count": 2 if sub else 1, "rank": rank}]
    if sub:
        g.append({"pg_name": "1", "pg_desc": "sub", "backend_config": "cpu:gloo",
                  "ranks": [0, 1], "group_size": 2, "group_count": 2, "rank": rank})
    return json.dumps(g)


def pg_node(nid, text):
    return {"id": nid, "name": "## process_group:init ##", "ctrl_deps": 2,
            "inputs": {"values": [text], "shapes": [[]], "types": ["String"]},
            "outputs": E, "attrs": A}


def trace(path, pgs=(), ops=()):
    """A trace with its process and thread nodes, the given process-group nodes (in this
    order in the file) and ops (dicts: id, name, inputs)."""
    nodes = [{"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1,
              "inputs": E, "outputs": E, "attrs": A}]
    nodes += list(pgs)
    for o in ops:
        nodes.append({"id": o["id"], "name": o["name"], "ctrl_deps": 2,
                      "inputs": o.get("inputs", E), "outputs": E, "attrs": A})
    nodes.append({"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1,
                  "inputs": E, "outputs": E, "attrs": []})
    with open(path, "w") as f:
        f.write(json.dumps({"schema": "1.1.1", "pid": 1, "time": "2026-01-01 00:00:00",
                            "start_ts": 0, "nodes": nodes, "finish_ts": 1}))
    return path


def run(args, stdin=None):
    return subprocess.run([etr, "chakra"] + args, capture_output=True, text=True, input=stdin,
                          env=dict(os.environ, ETR_PROGRESS="0"))


def fresh(name):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


# ---- a small .et decoder (Chakra's et_def.proto field numbers) ----

def varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7f) << s
        s += 7
        if not c & 0x80:
            return r, i


def fields(b):
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        fn, wt = k >> 3, k & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = struct.unpack("<d", b[i:i + 8])[0], i + 8
        elif wt == 5:
            v, i = struct.unpack("<f", b[i:i + 4])[0], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.append((fn, v))
    return out


def et_nodes(path):
    """[(id, name, type, inputs.values, inputs.types)] of the file's nodes, in file order."""
    b = open(path, "rb").read()
    i, msgs = 0, []
    while i < len(b):
        n, i = varint(b, i)
        msgs.append(b[i:i + n])
        i += n
    out = []
    for m in msgs[1:]:  # the first is GlobalMetadata
        d = {"values": None, "types": None}
        for fn, v in fields(m):
            if fn == 1:
                d["id"] = v
            elif fn == 2:
                d["name"] = v.decode()
            elif fn == 3:
                d["type"] = v
            elif fn == 8:
                for f2, v2 in fields(v):
                    if f2 == 1:
                        d["values"] = v2.decode()
                    elif f2 == 3:
                        d["types"] = v2.decode()
        out.append(d)
    return out


METADATA = 1


def case_pg_order():
    """Newest first in the JSON (id 4 lists groups 0 and 1, id 3 only group 0): the first
    METADATA node of the .et must be id 4. Before the fix: id 3 (id order)."""
    p = trace(os.path.join(work, "order.json"),
              pgs=[pg_node(4, groups(0, 2, sub=True)), pg_node(3, groups(0, 2))],
              ops=[{"id": 5, "name": "aten::add"}])
    d = fresh("order-et")
    r = run([p, "-o", d, "--rank", "0"])
    if not check(r.returncode == 0, "pg_order: exit %d %r" % (r.returncode, r.stderr)):
        return
    meta = [n for n in et_nodes(os.path.join(d, "rank.0.et")) if n.get("type") == METADATA]
    check([n["id"] for n in meta] == [4, 3],
          "pg_order: METADATA nodes in the order %s, wanted the trace's [4, 3]"
          % [n["id"] for n in meta])
    check(meta and '"pg_name": "1"' in meta[0]["values"],
          "pg_order: the first METADATA node lacks group 1: %r" % (meta[0] if meta else None))


def case_world():
    """Group "0" says 3 ranks: 0, 1 and 2 convert; 0 and 2 (1 missing) are refused, and so
    are 0, 1 and a rank 2 of a 4-rank run. Traces without a process-group node, and one
    TRACE alone, convert as before."""
    t = [trace(os.path.join(work, "w3-%d.json" % r), pgs=[pg_node(3, groups(r, 3))],
               ops=[{"id": 4, "name": "aten::add"}]) for r in range(3)]
    other = trace(os.path.join(work, "w4-2.json"), pgs=[pg_node(3, groups(2, 4))],
                  ops=[{"id": 4, "name": "aten::add"}])
    d = fresh("w-all")
    r = run(t + ["-o", d])
    check(r.returncode == 0 and sorted(os.listdir(d)) == ["rank.%d.et" % i for i in range(3)],
          "world: the 3 ranks of a 3-rank run: exit %d %r %r" % (r.returncode, r.stderr,
                                                                  os.listdir(d)))
    d = fresh("w-miss")
    r = run([t[0], t[2], "-o", d])
    check(r.returncode == 1 and "rank 1" in r.stderr and "3 ranks" in r.stderr,
          "world: rank 1 of 3 missing: exit %d %r" % (r.returncode, r.stderr))
    check(not os.path.exists(d) or os.listdir(d) == [],
          "world: rank missing: files written %r" % (os.listdir(d) if os.path.exists(d) else []))
    check(r.stdout == "", "world: rank missing: report lines printed %r" % r.stdout)
    d = fresh("w-mixed")
    r = run([t[0], t[1], other, "-o", d])
    check(r.returncode == 1 and "w4-2.json" in r.stderr and "4" in r.stderr,
          "world: a rank of a 4-rank run among a 3-rank run's: exit %d %r" % (r.returncode,
                                                                             r.stderr))
    check(not os.path.exists(d) or os.listdir(d) == [],
          "world: mixed runs: files written %r" % (os.listdir(d) if os.path.exists(d) else []))
    # No size recorded: the position is the rank, as before.
    s = [trace(os.path.join(work, "nopg-%d.json" % r), ops=[{"id": 4, "name": "aten::add"}])
         for r in range(2)]
    d = fresh("w-nopg")
    r = run(s + ["-o", d])
    check(r.returncode == 0 and sorted(os.listdir(d)) == ["rank.0.et", "rank.1.et"],
          "world: traces without a size: exit %d %r" % (r.returncode, r.stderr))
    # One TRACE (one rank at a time, --rank): converted as before.
    d = fresh("w-one")
    r = run([t[2], "-o", d])
    check(r.returncode == 0 and os.listdir(d) == ["rank.2.et"],
          "world: a single TRACE of a 3-rank run: exit %d %r" % (r.returncode, r.stderr))


def case_doubles():
    vals = [[1, 2, 0, 4, 4, "cpu"], 1.0, -0.1, 0.0, 1e+300, 2.5e-08, 3, 0.30000000000000004]
    types = ["Tensor(float)", "Double", "Double", "Double", "Double", "Double", "Int", "Double"]
    p = trace(os.path.join(work, "dbl.json"),
              ops=[{"id": 3, "name": "aten::fill_",
                    "inputs": {"values": vals, "shapes": [[1]] + [[]] * 7, "types": types}}])
    d = fresh("dbl-et")
    r = run([p, "-o", d])
    if not check(r.returncode == 0, "doubles: exit %d %r" % (r.returncode, r.stderr)):
        return
    n = [x for x in et_nodes(os.path.join(d, "rank.0.et")) if x.get("name") == "aten::fill_"]
    want = '[[1,2,0,4,4,"cpu"],1.0,-0.1,0.0,1e+300,2.5e-08,3,0.30000000000000004]'
    check(n and n[0]["values"] == want, "doubles: IOInfo values %r, wanted %r"
          % (n[0]["values"] if n else None, want))


def case_dup_msg():
    """rank1.json records no rank (position 0); rank0.json records rank 0. Before: "rank 0
    again (nopos.json has it too)", and the note that its collectives name no group."""
    nopg = trace(os.path.join(work, "nopos.json"),
                 ops=[{"id": 4, "name": "c10d::allreduce_"}])
    r0 = trace(os.path.join(work, "rec0.json"), pgs=[pg_node(3, groups(0, 2))],
               ops=[{"id": 4, "name": "aten::add"}])
    d = fresh("dup-et")
    r = run([nopg, r0, "-o", d])
    check(r.returncode == 1 and "rank 0 again" in r.stderr, "dup_msg: exit %d %r"
          % (r.returncode, r.stderr))
    check("position" in r.stderr and "has it too" not in r.stderr,
          "dup_msg: the message does not say the rank came from the position: %r" % r.stderr)
    check("name no process group" not in r.stderr,
          "dup_msg: a per-file note printed for a run that wrote nothing: %r" % r.stderr)


def case_pg_text():
    """Group "0"'s rank is read from the group list as JSON: a '}' inside its pg_desc string
    (before its rank) is text, not the object's end. Before: a hand scan of the text stopped
    there, found no rank, and the lone trace of rank 2 became rank.0.et."""
    g = json.dumps([{"pg_name": "0", "pg_desc": "default}", "backend_config": "cpu:gloo",
                     "ranks": [], "group_size": 3, "group_count": 1, "rank": 2}])
    p = trace(os.path.join(work, "pgtext.json"), pgs=[pg_node(3, g)],
              ops=[{"id": 4, "name": "aten::add"}])
    d = fresh("pgtext-et")
    r = run([p, "-o", d])
    check(r.returncode == 0 and os.listdir(d) == ["rank.2.et"],
          "pg_text: exit %d %r, files %r" % (r.returncode, r.stderr,
                                             os.listdir(d) if os.path.exists(d) else []))


def case_stdin_twice():
    p = trace(os.path.join(work, "stdin.json"), ops=[{"id": 4, "name": "aten::add"}])
    d = fresh("stdin-et")
    r = run(["-", "-", "-o", d], stdin=open(p).read())
    check(r.returncode == 2 and "stdin" in r.stderr and "once" in r.stderr,
          "stdin_twice: exit %d %r" % (r.returncode, r.stderr))
    r = run(["-", "-o", d], stdin=open(p).read())
    check(r.returncode == 0, "stdin_twice: '-' once: exit %d %r" % (r.returncode, r.stderr))


for c in cases:
    globals()["case_" + c]()
if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("OK: " + " ".join(cases))
