#!/usr/bin/env python3
"""Print a short summary of an etr execution trace (a stand-in until `etr summary` exists).

usage: trace_summary.py TRACE.json [--top N]

Prints the schema, node counts, the threads that recorded, and the most frequent operators
with their total inclusive time when the trace has timing.
"""
import argparse
import collections
import json
import os
import sys

PROCESS = "[pytorch|profiler|execution_trace|process]"
THREAD = "[pytorch|profiler|execution_trace|thread]"


def attr(node, name):
    for a in node.get("attrs", []):
        if a.get("name") == name:
            return a.get("value")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()

    try:
        with open(args.trace, "rb") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"trace_summary: {args.trace}: {e}", file=sys.stderr)
        return 1

    nodes = doc.get("nodes", [])
    ops = [n for n in nodes if n.get("name") not in (PROCESS, THREAD)]
    threads = sorted(attr(n, "tid") for n in nodes if n.get("name") == THREAD)
    count = collections.Counter(n.get("name", "") for n in ops)
    incl = collections.Counter()
    for n in ops:
        incl[n.get("name", "")] += n.get("inclusive_dur", 0) or 0
    timed = any("inclusive_dur" in n for n in ops)
    incomplete = sum(1 for n in ops if attr(n, "etr_incomplete"))

    size = os.path.getsize(args.trace)
    print(f"{args.trace}: {size} bytes, schema {doc.get('schema')}, pid {doc.get('pid')}")
    print(f"  nodes: {len(nodes)} ({len(ops)} ops, {len(threads)} thread nodes, 1 process node)"
          + (f", {incomplete} incomplete" if incomplete else ""))
    print(f"  threads (tid): {', '.join(str(t) for t in threads) or '-'}")
    if ops:
        print(f"  bytes per node: {size // max(len(nodes), 1)}")
    print(f"  top {min(args.top, len(count))} ops by count:")
    for name, c in count.most_common(args.top):
        extra = f"  ({incl[name]} us in total)" if timed else ""
        print(f"    {c:8d}  {name}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
