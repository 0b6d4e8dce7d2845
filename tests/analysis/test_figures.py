#!/usr/bin/env python3
"""The figures of `etr summary`, `etr graph` and `etr replay` against an independent
computation written from docs/CLI.md (the standard library only).

Cases (one ctest entry each):
  summary    summary --json (counts, per-thread busy and span, per-name exclusive and
             inclusive sums, tensor values) on traces of etr-example-runtime, hand-made edge
             traces and the real PyTorch traces when present
  schedule   graph's critical-path length and replay's makespan (idle kept and --no-idle)
             against a simulation of the documented model, on the same traces
  negative   an invalid trace with negative durations: no sum of times goes below 0
  graph_mixed  graph of a trace where only some ops are timed: the path's length and the
             cost model the report states agree (timed ops their exclusive time, 1 us each
             for the others, as replay)
  replay_csv replay --csv read back with Python's csv module: one row per op, names with a
             quote or a comma whole (control characters as spaces), cost = exclusive time
  path_names the path's "time on the path by op name" lines and its idle time add up to its
             length, in graph and replay (a line sums the names past the first 8)
  chrome_order  chrome's layout of an untimed trace: nested as recorded when children come
             before their parent (as etr and PyTorch write them); listed parent first (nodes
             sorted by id), laid out flat, and a warning says so
Exit status: 0 pass, 1 fail.
"""
import argparse
import collections
import csv
import gzip
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from etr_checks import PROCESS, THREAD, check, finish  # noqa: E402


def load(path):
    with open(path, "rb") as f:
        b = f.read()
    return json.loads(gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b)


def attrs(n):
    return {a["name"]: a["value"] for a in n.get("attrs", [])}


def is_op(n):
    return n["name"] not in (PROCESS, THREAD)


def timed(n):
    return "ts" in n and "inclusive_dur" in n and "exclusive_dur" in n


def split_top(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "[(" and 1 or 0
        depth -= ch in "])" and 1 or 0
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur] if cur else out


def walk(t, v, out):
    t = t.strip()
    if t.startswith("Tensor"):
        if isinstance(v, list) and len(v) == 6:
            out.append(v)
        return
    for pre in ("GenericList[", "Tuple[", "List["):
        if t.startswith(pre) and t.endswith("]") and isinstance(v, list):
            subs = split_top(t[len(pre):-1])
            for i, x in enumerate(v):
                walk(subs[min(i, len(subs) - 1)] if subs else "", x, out)


def tensors(io):
    out = []
    for t, v in zip(io.get("types", []), io.get("values", [])):
        walk(t, v, out)
    return out


def nonneg(x):
    return x if x > 0 else 0


# ---- summary ----

def ref_summary(d):
    ops = [n for n in d["nodes"] if is_op(n)]
    th, names, nt = {}, {}, 0
    for n in ops:
        tid = attrs(n).get("tid", 0)
        e = th.setdefault(tid, {"ops": 0, "busy_us": 0, "first_ts": None, "last_end_ts": None})
        e["ops"] += 1
        c = names.setdefault(n["name"], [0, 0, 0])
        c[0] += 1
        if timed(n):
            ex, inc = nonneg(n["exclusive_dur"]), nonneg(n["inclusive_dur"])
            e["busy_us"] += ex
            c[1] += ex
            c[2] += inc
            s, en = n["ts"], n["ts"] + inc
            e["first_ts"] = s if e["first_ts"] is None else min(e["first_ts"], s)
            e["last_end_ts"] = en if e["last_end_ts"] is None else max(e["last_end_ts"], en)
    for n in d["nodes"]:
        nt += len(tensors(n.get("inputs", {}))) + len(tensors(n.get("outputs", {})))
    return {"nodes": len(d["nodes"]), "ops": len(ops), "op_names": len(names),
            "thread_nodes": sum(n["name"] == THREAD for n in d["nodes"]),
            "threads": th, "names": names, "tensor_values": nt}


def check_summary(etr, path):
    r = ref_summary(load(path))
    p = subprocess.run([etr, "summary", "--json", "--top", "100000", path],
                       capture_output=True, text=True)
    if not check(p.returncode == 0, f"summary {path}: exit {p.returncode}: {p.stderr}"):
        return
    j = json.loads(p.stdout)
    for k in ("nodes", "ops", "op_names", "thread_nodes"):
        check(j[k] == r[k], f"summary {path}: {k}: want {r[k]}, got {j[k]}")
    check(j["tensors"]["values"] == r["tensor_values"],
          f"summary {path}: tensor values: want {r['tensor_values']}, got {j['tensors']['values']}")
    got = {t["tid"]: {k: t[k] for k in ("ops", "busy_us", "first_ts", "last_end_ts")}
           for t in j["threads"]}
    check(got == r["threads"], f"summary {path}: threads: want {r['threads']}, got {got}")
    for t in j["threads"]:
        check(t["busy_us"] >= 0, f"summary {path}: tid {t['tid']}: busy {t['busy_us']} < 0")
        if t["first_ts"] is not None:
            check(t["busy_us"] <= t["last_end_ts"] - t["first_ts"],
                  f"summary {path}: tid {t['tid']}: busy over its span")
    for lst in ("ops_by_count", "ops_by_exclusive_time"):
        g = {o["name"]: [o["count"], o["exclusive_us"], o["inclusive_us"]] for o in j[lst]}
        check(g == r["names"], f"summary {path}: {lst} differs from the reference")


# ---- graph and replay: the documented model (CLI.md "graph", "replay") ----

def schedule(d, thread_order, keep_idle=True):
    ops = [n for n in d["nodes"] if is_op(n)]
    tm = bool(ops) and all(timed(n) for n in ops)
    for n in ops:
        n["_tid"] = attrs(n).get("tid", 0)
    ops.sort(key=(lambda n: (n["ts"], n["id"])) if tm else (lambda n: n["id"]))
    byid = {n["id"]: n for n in ops}
    writer, deps = {}, collections.defaultdict(list)
    for n in ops:
        srcs = set()
        for v in tensors(n["inputs"]):
            if v[5] != "":  # an undefined tensor is no data
                w = writer.get(("s", v[1]) if v[1] else ("t", v[0]))
                if w is not None and w != n["id"]:
                    srcs.add(w)
        deps[n["id"]] = [("data", w) for w in sorted(srcs)]
        fp = attrs(n).get("fw_parent", 0)
        if fp in byid and ((byid[fp]["ts"], fp) < (n["ts"], n["id"]) if tm else fp < n["id"]):
            deps[n["id"]].append(("fw", fp))
        for v in tensors(n["outputs"]):
            if v[5] != "":
                writer[("s", v[1]) if v[1] else ("t", v[0])] = n["id"]
    start, end, reccur = {}, {}, {}
    stack, cur = collections.defaultdict(list), collections.defaultdict(float)
    t0 = min(n["ts"] for n in ops) if tm else 0
    recmax = collections.defaultdict(lambda: t0)

    def close(tid):
        x = stack[tid].pop()
        n = byid[x]
        if tm:  # the parent's recorded time after its last child
            post = max(n["ts"] + n["inclusive_dur"] - reccur[x], 0)
        else:
            post = 1.0  # untimed: 1 us per op
        end[x] = max(cur[tid], start[x]) + post
        if tm:
            rec_end = max(n["ts"] + n["inclusive_dur"], reccur[x])
            if stack[tid] and stack[tid][-1] == n["ctrl_deps"]:
                reccur[n["ctrl_deps"]] = max(reccur[n["ctrl_deps"]], rec_end)
            else:
                recmax[tid] = max(recmax[tid], rec_end)
        cur[tid] = end[x]

    for n in ops:
        i, tid, p = n["id"], n["_tid"], n["ctrl_deps"]
        nested = p in stack[tid]
        while stack[tid] and not (nested and stack[tid][-1] == p):
            close(tid)
        est = cur[tid] if nested or thread_order else 0.0
        if nested and tm:  # the parent's recorded lead before this child (2 us of rounding)
            est = max(est + max(n["ts"] - reccur[p], -2), start[p])
        elif not nested and thread_order and keep_idle and tm and n["ts"] - recmax[tid] >= -2:
            est = max(est + n["ts"] - recmax[tid], 0)  # recorded idle time kept
        for kind, f in deps[i]:
            if kind == "fw":
                est = max(est, start[f])
                continue
            ft = byid[f]["_tid"]
            if f in stack[ft]:
                if ft == tid:
                    continue  # an open ancestor: nesting orders them
                while f in stack[ft]:
                    close(ft)
            est = max(est, end[f])
        start[i], reccur[i] = est, n["ts"] if tm else 0
        stack[tid].append(i)
        cur[tid] = est
    for tid in list(stack):
        while stack[tid]:
            close(tid)
    return max(end.values(), default=0.0)


def check_schedule(etr, path):
    d = load(path)
    out = subprocess.run([etr, "graph", path], capture_output=True, text=True).stdout
    m = re.search(r"length: \d+ ops, ([\d.]+) us", out)
    want = schedule(d, False)
    check(m and abs(float(m.group(1)) - want) < 0.05,
          f"graph {path}: critical path {m and m.group(1)} us, reference {want:.1f}")
    for extra, idle in (([], True), (["--no-idle"], False)):
        out = subprocess.run([etr, "replay", path] + extra, capture_output=True, text=True).stdout
        m = re.search(r"predicted makespan: ([\d.]+) us", out)
        want = schedule(load(path), True, idle)
        check(m and abs(float(m.group(1)) - want) < 0.05,
              f"replay {' '.join(extra)} {path}: makespan {m and m.group(1)}, reference {want:.1f}")


# ---- chrome's layout of untimed ops ----

def check_chrome_order(etr, work):
    T = THREAD
    kids_first = [node(2, T, 1, 1), node(4, "c1", 3, 1), node(5, "c2", 3, 1), node(3, "p", 2, 1),
                  node(6, "q", 2, 1)]
    for name, nodes, nested in (("kids_first", kids_first, True),
                                ("parent_first", sorted(kids_first, key=lambda n: n["id"]), False)):
        path = write(work, name, nodes)
        out = os.path.join(work, name + ".chrome.json")
        p = subprocess.run([etr, "chrome", path, "-o", out], capture_output=True, text=True)
        if not check(p.returncode == 0, f"chrome {name}: exit {p.returncode}: {p.stderr}"):
            continue
        ev = {e["args"]["id"]: e for e in load(out)["traceEvents"] if e["ph"] == "X"}
        inside = all(ev[3]["ts"] <= ev[k]["ts"] and
                     ev[k]["ts"] + ev[k]["dur"] <= ev[3]["ts"] + ev[3]["dur"] for k in (4, 5))
        warned = "come right after their parent" in p.stderr
        check(inside == nested, f"chrome {name}: children inside their parent: {inside}")
        check(warned == (not nested), f"chrome {name}: warning about the order: {warned}: "
              f"{p.stderr}")


# ---- traces ----

def A(n, t, v):
    return {"name": n, "type": t, "value": v}


def node(i, name, parent, tid, ts=None, incl=None, excl=None, fw=0, inputs=(), outputs=()):
    def io(ts_):
        return {"values": [list(t) for t in ts_], "shapes": [[t[3]] for t in ts_],
                "types": ["Tensor(float)"] * len(ts_), "strides": [[1] for t in ts_]}
    n = {"id": i, "name": name, "ctrl_deps": parent, "inputs": io(inputs), "outputs": io(outputs)}
    if ts is not None:
        n.update(ts=ts, inclusive_dur=incl, exclusive_dur=excl)
    scope = 7 if name in (THREAD, PROCESS) else 0
    n["attrs"] = [A("rf_id", "uint64", i), A("fw_parent", "uint64", fw), A("seq_id", "int64", -1),
                  A("scope", "uint64", scope), A("tid", "uint64", tid), A("fw_tid", "uint64", 0),
                  A("op_schema", "string", ""), A("kernel_backend", "string", ""),
                  A("kernel_file", "string", "")]
    return n


def write(work, name, nodes):
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "2026-11-28 00:00:00",
                   "start_ts": 0, "nodes": nodes + [node(1, PROCESS, 1, 0)], "finish_ts": 0}, f)
    return path


def edge_traces(work):
    T = THREAD
    t = {}
    t["zero"] = [node(2, T, 1, 1), node(3, "z0", 4, 1, 100, 0, 0), node(5, "z1", 4, 1, 100, 0, 0),
                 node(4, "p", 2, 1, 100, 0, 0), node(6, "q", 2, 1, 100, 5, 5)]
    t["same_edges"] = [node(2, T, 1, 1), node(4, "c1", 3, 1, 10, 3, 3), node(5, "c2", 3, 1, 17, 3, 3),
                       node(3, "p", 2, 1, 10, 10, 4)]
    deep = [node(2, T, 1, 1)]
    for k in range(60, 0, -1):
        deep.append(node(2 + k, "d%d" % k, 1 + k, 1, k, 2 * (60 - k) + 1, 1 if k == 60 else 2))
    t["deep"] = deep
    t["overlap"] = [node(2, T, 1, 1), node(4, "c", 3, 1, 15, 15, 15), node(3, "p", 2, 1, 10, 10, 0)]
    t["no_ops_thread"] = [node(2, T, 1, 1), node(3, T, 1, 2), node(4, "a", 2, 1, 0, 5, 5)]
    t["out_of_order"] = [node(7, "p", 2, 1, 0, 10, 4), node(2, T, 1, 1), node(5, "c2", 7, 1, 6, 4, 4),
                         node(3, "c1", 7, 1, 1, 2, 2),
                         node(9, "q", 2, 1, 20, 3, 3, inputs=[(100, 101, 0, 4, 4, "cpu")]),
                         node(8, "w", 2, 1, 12, 2, 2, outputs=[(100, 101, 0, 4, 4, "cpu")])]
    t["negative_ts"] = [node(2, T, 1, 1), node(4, "c", 3, 1, -50, 10, 10), node(3, "p", 2, 1, -60, 30, 20),
                        node(5, "q", 2, 1, -20, 5, 5)]
    t["two_threads"] = [node(2, T, 1, 1), node(3, T, 1, 2),
                        node(4, "w1", 2, 1, 0, 10, 10, outputs=[(50, 51, 0, 4, 4, "cpu")]),
                        node(5, "r1", 3, 2, 12, 5, 5, inputs=[(50, 51, 0, 4, 4, "cpu")],
                             outputs=[(52, 53, 0, 4, 4, "cpu")]),
                        node(6, "r2", 2, 1, 20, 7, 7, inputs=[(52, 53, 0, 4, 4, "cpu")]),
                        node(7, "bw", 3, 2, 30, 2, 2, fw=6)]
    return [write(work, k, v) for k, v in t.items()]


def traces(a):
    out = edge_traces(a.work)
    if a.runtime and os.path.exists(a.runtime):
        for th in (2, 4):
            p = os.path.join(a.work, "ex%d.json" % th)
            subprocess.run([a.runtime, "--out", p, "--threads", str(th), "--iters", "2"],
                           check=True, capture_output=True)
            out.append(p)
    if a.real and os.path.isdir(a.real):
        out += [os.path.join(a.real, f) for f in sorted(os.listdir(a.real))
                if f.endswith(".json") or f.endswith(".json.gz")]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--etr", required=True)
    ap.add_argument("--runtime", default="")
    ap.add_argument("--real", default="")
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=["summary", "schedule", "negative", "chrome_order",
                                       "graph_mixed", "replay_csv", "path_names"])
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if a.case == "path_names":
        for p in traces(a):
            for cmd in ("graph", "replay"):
                out = subprocess.run([a.etr, cmd, p], capture_output=True, text=True).stdout
                m = re.search(r"length: \d+ ops, ([\d.]+) us(?: \(([\d.]+) us of it)?", out)
                if not check(m, f"{cmd} {p}: no length: {out[-300:]}"):
                    continue
                lines = re.findall(r"^\s+([\d.]+) us\s+[\d.]+%\s+\d+ x  ", out, re.M)
                total = sum(map(float, lines)) + float(m.group(2) or 0)
                check(abs(total - float(m.group(1))) <= 0.1 * (len(lines) + 1),
                      f"{cmd} {p}: the path's times by name add up to {total:.1f}, "
                      f"its length is {m.group(1)}")
    elif a.case == "replay_csv":
        names = ['a"b', 'say "hi", twice', "x\ny", "plain"]
        p = write(a.work, "csv_names", [node(2, THREAD, 1, 1)] +
                  [node(3 + k, nm, 2, 1, 10 * k, 3 + k, 3 + k) for k, nm in enumerate(names)])
        out = os.path.join(a.work, "s.csv")
        r = subprocess.run([a.etr, "replay", p, "--csv", out], capture_output=True, text=True)
        check(r.returncode == 0, f"replay --csv: exit {r.returncode}: {r.stderr}")
        with open(out, newline="") as f:
            rows = list(csv.DictReader(f))
        got = [(r["name"], float(r["cost_us"])) for r in rows]
        want = [(nm.replace("\n", " "), 3.0 + k) for k, nm in enumerate(names)]
        check(got == want, f"replay --csv: rows {got}, want {want}")
    elif a.case == "graph_mixed":
        # a: 5 us recorded; b has ts only, c no exclusive_dur: untimed, 1 us each
        b, c = node(4, "b", 2, 1), node(5, "c", 2, 1)
        b["ts"], c["ts"], c["inclusive_dur"] = 10, 20, 4
        p = write(a.work, "mixed", [node(2, THREAD, 1, 1), node(3, "a", 2, 1, 0, 5, 5), b, c])
        out = subprocess.run([a.etr, "graph", p], capture_output=True, text=True).stdout
        m = re.search(r"length: (\d+) ops, ([\d.]+) us", out)
        check(m and float(m.group(2)) == 5.0, f"graph mixed: length {m and m.group(2)}, want 5")
        check("every op counts 1 unit" not in out and "2 of 3 ops have no timing" in out,
              f"graph mixed: the report's cost model: {out}")
        out = subprocess.run([a.etr, "replay", p], capture_output=True, text=True).stdout
        check("predicted makespan: 7.0 us" in out, f"replay mixed: {out}")
    elif a.case == "chrome_order":
        check_chrome_order(a.etr, a.work)
    elif a.case == "negative":
        # invalid: exclusive -1 on p, both durations -4 on n (counted as 0, as graph does)
        p = write(a.work, "negative", [node(2, THREAD, 1, 1), node(4, "c", 3, 1, 5, 3, 3),
                                       node(3, "p", 2, 1, 0, 2, -1), node(5, "n", 2, 1, 10, -4, -4)])
        check_summary(a.etr, p)
    else:
        for p in traces(a):
            (check_summary if a.case == "summary" else check_schedule)(a.etr, p)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
