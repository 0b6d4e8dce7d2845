#!/usr/bin/env python3
"""etr replay --model's speed-up rules and etr summary --top's largest tensors against
reference models written here (ctest cli.model_topn): the lookup structures behind them (a
hash table and prefix index for the rules, a heap with a hash index for the tensors) must
give what the plain rules of docs/CLI.md give, ties, duplicates and precedence included.
Deterministic: fixed seeds, no timing.

usage: test_model_topn.py ETR WORKDIR
"""
import csv
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from etr_checks import PROCESS, THREAD, check, finish  # noqa: E402

ETR, WORK = sys.argv[1:3]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

EMPTY = {"values": [], "shapes": [], "types": []}


def attrs(tid, scope=0):
    a = [("rf_id", "uint64", 0), ("fw_parent", "uint64", 0), ("seq_id", "int64", -1),
         ("scope", "uint64", scope), ("tid", "uint64", tid), ("fw_tid", "uint64", 0),
         ("op_schema", "string", "")]
    return [{"name": n, "type": t, "value": v} for n, t, v in a]


def trace(name, ops):
    """WORK/name: thread node 2, the ops (children of it), process node 1. ops: dicts with
    id, name, and optionally ts/excl (timing) and outputs."""
    nodes = [{"id": 2, "name": THREAD, "ctrl_deps": 1, "inputs": EMPTY, "outputs": EMPTY,
              "attrs": attrs(1, 7)}]
    for o in ops:
        n = {"id": o["id"], "name": o["name"], "ctrl_deps": 2, "inputs": EMPTY,
             "outputs": o.get("outputs", EMPTY)}
        if "ts" in o:
            n["ts"], n["inclusive_dur"], n["exclusive_dur"] = o["ts"], o["excl"], o["excl"]
        n["attrs"] = attrs(1)
        nodes.append(n)
    nodes.append({"id": 1, "name": PROCESS, "ctrl_deps": 1, "inputs": EMPTY, "outputs": EMPTY,
                  "attrs": attrs(0, 7)})
    d = {"schema": "1.1.0-chakra.0.0.4", "pid": 1, "time": "2026-01-01 00:00:00",
         "start_ts": 0, "nodes": nodes, "finish_ts": 1}
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        json.dump(d, f)
    return path


def run(args):
    env = dict(os.environ, ETR_PROGRESS="0")
    return subprocess.run([ETR, *args], capture_output=True, timeout=300, env=env)


def ran(r, what):
    return check(r.returncode == 0, "%s: exit %d: %s" %
                 (what, r.returncode, r.stderr[-400:].decode("utf-8", "replace")))


# ---- replay --model: speed-up rules ----

def ref_speedup(directives, name):
    """docs/CLI.md's rule: the last exact NAME; else the longest PREFIX* starting the name
    (the first of equal ones); else 1. Names compare up to a NUL, as C strings."""
    name = name.split("\0", 1)[0]
    exact = [f for p, f in directives if not p.endswith("*") and p == name]
    if exact:
        return exact[-1]
    best, best_len = 1.0, -1
    for p, f in directives:
        if p.endswith("*") and name.startswith(p[:-1]) and len(p) - 1 > best_len:
            best, best_len = f, len(p) - 1
    return best


def quote(p):
    return '"%s"' % p if p == "" or "#" in p or any(c.isspace() for c in p) else p


EXCL = 1000003  # an op's recorded exclusive time: large, so cost_us shows the factor


def replay_costs(path, model):
    """{op id: cost_us text} from replay --csv, and the report."""
    csv_path = path + ".csv"
    r = run(["replay", "--model", model, "--csv", csv_path, path])
    if not ran(r, "replay --model %s" % os.path.basename(model)):
        return None, r
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {int(x["id"]): x["cost_us"] for x in rows}, r


def check_model(tag, names, directives, extra=()):
    ops = [{"id": 10 + i, "name": n, "ts": i * (EXCL + 1), "excl": EXCL}
           for i, n in enumerate(names)]
    path = trace("replay-%s.json" % tag, ops)
    model = os.path.join(WORK, "model-%s.txt" % tag)
    with open(model, "w") as f:
        f.write("# %s\n" % tag)
        for line in extra:
            f.write(line + "\n")
        for p, fac in directives:
            f.write("speedup %s %r\n" % (quote(p), fac))
    got, r = replay_costs(path, model)
    if got is None:
        return
    check(("(%d speed-up rule(s)" % len(directives)).encode() in r.stdout,
          "%s: the report counts %d rules: %r" % (tag, len(directives), r.stdout[:300]))
    bad = []
    for o in ops:
        want = "%.3f" % (EXCL / ref_speedup(directives, o["name"]))
        if got.get(o["id"]) != want:
            bad.append((o["name"], got.get(o["id"]), want))
    check(not bad, "%s: %d op(s) costed wrong, e.g. (name, got, want) %r" %
          (tag, len(bad), bad[:5]))


def model_precedence():
    """Exact beats prefix whatever the order; of two exact ones the last wins; the longest
    prefix wins, of two equal ones the first; "*" is the catch-all; '*' inside a name is
    literal, a trailing "**" is the prefix "...*"; the empty name is a name; a name compares
    up to a NUL."""
    names = ["aten::mm", "aten::mmx", "aten::m", "aten::", "aten", "", "a*b", "a*bc", "ab",
             "*x", "**y", "## forward ##", "x y", "other", "aten::mm\0tail", "aten::add_",
             "aten::addmm", "c10d::allreduce_"]
    rules = [("aten::*", 2.0), ("aten::mm", 3.0), ("aten::m*", 4.0), ("aten::mm", 5.0),
             ("aten::*", 6.0), ("aten::add*", 7.0), ("aten::add_", 8.0), ("aten::add*", 9.0),
             ("a*b", 10.0), ("**", 11.0), ("*", 12.0), ("## forward ##", 13.0), ("", 14.0),
             ("x y", 0.5), ("*", 15.0), ("aten::addmm*", 16.0), ("aten::addm*", 17.0)]
    check_model("precedence", names, rules)
    # the same rules in other orders: only the order of equal rules matters
    rnd = random.Random(3)
    for k in range(4):
        shuffled = rules[:]
        rnd.shuffle(shuffled)
        check_model("precedence-%d" % k, names, shuffled)
    # no rule matches: factor 1; an empty model: factor 1
    check_model("nomatch", names, [("zzz", 2.0), ("zzz*", 3.0), ("aten::mmm", 4.0)])
    check_model("empty", names, [])


def model_random():
    """Many rules (past the hash tables' first sizes), drawn from the op names: exact
    names, prefixes of every length, duplicates with other factors, literal '*'s."""
    rnd = random.Random(12)
    stems = ["aten::", "c10d::", "nccl:", "gloo:", "autograd::engine::", "## ", "Optimizer.", ""]
    names = sorted({rnd.choice(stems) + "".join(rnd.choice("abmx_*") for _ in range(
        rnd.randint(0, 9))) for _ in range(700)})
    for tag, count in (("random-small", 40), ("random-large", 3000)):
        rules = []
        while len(rules) < count:
            n = rnd.choice(names)
            x = rnd.random()
            if x < 0.4:
                p = n
            elif x < 0.85:
                p = n[:rnd.randint(0, len(n))] + "*"
            elif x < 0.9:
                p = "*"
            else:
                p = rnd.choice(names) + rnd.choice(["**", "*a", "a"])
            rules.append((p, rnd.choice([0.25, 0.5, 1.5, 2.0, 3.0, 7.0, 10.0])))
            if rnd.random() < 0.15:
                rules.append((p, rnd.choice([0.75, 4.0, 5.0])))
        check_model(tag, names + ["unmatched::op", "zz"], rules,
                    extra=["untimed_us 1", "link 5 25"])


# ---- summary --top N: the largest tensors ----

def tensor_out(items):
    """outputs holding the tensors (id, storage, numel, itemsize, dtype, device)."""
    return {"values": [[i, s, 0, n, b, dev] for i, s, n, b, _, dev in items],
            "shapes": [[n] for _, _, n, _, _, _ in items],
            "types": ["Tensor(%s)" % dt for _, _, _, _, dt, _ in items]}


def ref_top(ops, top):
    """Each (id, storage) once at its largest size, with the op and node of the first
    sighting at that size; by bytes, then the lower id, then the lower storage."""
    best = {}
    for o in ops:
        for i, s, n, b, dt, dev in o["t"]:
            key = (i, s)
            if key not in best or n * b > best[key]["bytes"]:
                best[key] = {"bytes": n * b, "tensor_id": i, "storage_id": s, "offset": 0,
                             "numel": n, "itemsize": b, "dtype": dt, "device": dev,
                             "op": o["name"], "node": o["id"]}
    return sorted(best.values(), key=lambda x: (-x["bytes"], x["tensor_id"],
                                                x["storage_id"]))[:top]


def check_top(tag, ops, tops):
    path = trace("top-%s.json" % tag, [{"id": o["id"], "name": o["name"],
                                         "outputs": tensor_out(o["t"])} for o in ops])
    for top in tops:
        r = run(["summary", "--json", "--top", str(top), path])
        if not ran(r, "summary --top %d (%s)" % (top, tag)):
            continue
        got = json.loads(r.stdout)["tensors"]["top_by_bytes"]
        want = ref_top(ops, top)
        check(got == want, "%s --top %d: %d tensors, want %d; first difference %r" %
              (tag, top, len(got), len(want),
               next(((g, w) for g, w in zip(got, want) if g != w), None)))


def top_cases():
    """Ties (equal bytes: the lower id, then the lower storage first), the same id on other
    storages, a tensor seen again larger (in the heap, and after it left it), seen again at
    the same size (the first sighting stays), N larger than the number of tensors."""
    f = "float"
    ops = [
        {"id": 3, "name": "a", "t": [(1, 1, 4, 4, f, "cpu"), (2, 2, 4, 4, f, "cpu")]},
        {"id": 4, "name": "b", "t": [(1, 2, 4, 4, "half", "cuda:0"), (3, 3, 2, 8, f, "cpu")]},
        {"id": 5, "name": "c", "t": [(9, 9, 1, 4, f, "cpu"), (1, 1, 4, 4, f, "meta")]},
        {"id": 6, "name": "d", "t": [(8, 8, 2, 4, f, "cpu"), (0, 5, 16, 1, f, "cpu")]},
        {"id": 7, "name": "grow", "t": [(9, 9, 100, 4, "double", "cuda:1")]},
        {"id": 8, "name": "same", "t": [(9, 9, 200, 2, f, "cpu"), (2, 2, 8, 2, f, "x")]},
        {"id": 9, "name": "back", "t": [(8, 8, 50, 4, f, "cpu")]},
        {"id": 10, "name": "small", "t": [(8, 8, 1, 1, f, "cpu"), (-4, -1, 16, 1, f, "cpu")]},
    ]
    check_top("cases", ops, (1, 2, 3, 4, 5, 6, 8, 50, 100000))


def top_random():
    """Many sightings of few tensors (grown, shrunk, evicted and back) and of many: the
    heap's index kept right through every move."""
    rnd = random.Random(7)
    for tag, nops, ids, sizes, tops in (("few-ids", 3000, 60, 40, (1, 7, 20, 59, 60, 61, 500)),
                                        ("many-ids", 4000, 5000, 1000, (1, 20, 333, 1000)),
                                        ("growing", 2000, 3000, 0, (1, 20, 1000, 5000))):
        ops = []
        for k in range(nops):
            ts = []
            for _ in range(rnd.randint(1, 3)):
                i = rnd.randrange(ids)
                n = k + 1 if not sizes else rnd.randint(0, sizes)
                ts.append((i, i % 3 if rnd.random() < 0.7 else i, n, rnd.choice([1, 2, 4]),
                           rnd.choice(["float", "half"]), rnd.choice(["cpu", "cuda:0"])))
            ops.append({"id": 3 + k, "name": "op%d" % (k % 17), "t": ts})
        check_top(tag, ops, tops)


CASES = [model_precedence, model_random, top_cases, top_random]
for case in CASES:
    try:
        case()
    except Exception as e:  # noqa: BLE001 (a case that crashes is a failure, not the end)
        check(False, "%s raised %r" % (case.__name__, e))
sys.exit(finish("cli.model_topn: passed"))
