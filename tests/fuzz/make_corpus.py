#!/usr/bin/env python3
"""Seeds for fuzz_reader (tests/fuzz/corpus/fuzz_reader/): small traces cut down from our own
recordings, then truncated and mangled variants. Each seed is one mode byte (see
fuzz_reader.c) followed by the file's bytes.

  make_corpus.py OUTDIR TRACE.json...     # our traces (one node per line, as etr writes them)
  make_corpus.py --slices OUTDIR FILE...  # run-time only: small slices of other traces (the
                                          # real PyTorch ones), never committed

A cut-down trace keeps the header, the first few top-level ops of each thread with all their
descendants, the thread and process nodes, and the footer (and traceback tables), so it
still validates. Output is deterministic.
"""
import gzip
import hashlib
import json
import os
import re
import sys

MODES = [0, 1, 2, 4, 9, 2]  # hand, yajl, both compared, hand --strict, yajl verbose


def write(outdir, data, mode):
    blob = bytes([mode]) + data
    name = hashlib.sha1(blob).hexdigest()
    with open(os.path.join(outdir, name), "wb") as f:
        f.write(blob)


def split_trace(text):
    """(header lines, node lines, footer lines) of a trace as etr writes it."""
    lines = text.split("\n")
    i = next(k for k, l in enumerate(lines) if l.strip().startswith('"nodes"'))
    j = next(k for k in range(i + 1, len(lines)) if lines[k].strip().startswith("]"))
    return lines[: i + 1], lines[i + 1 : j], lines[j:]


def reduce_trace(text, top_per_thread=1, max_nodes=6):
    head, nodes, foot = split_trace(text)
    parsed = [json.loads(l.strip().rstrip(",")) for l in nodes]
    by_id = {n["id"]: n for n in parsed}
    special = {n["id"] for n in parsed if n["name"].startswith("[pytorch|profiler|")}
    children = {}
    for n in parsed:
        children.setdefault(n["ctrl_deps"], []).append(n["id"])
    keep = set(special)
    for t in special:
        if by_id[t]["ctrl_deps"] == t:
            continue  # the process node
        for top in children.get(t, [])[:top_per_thread]:
            stack = [top]
            while stack and len(keep) < max_nodes:
                x = stack.pop()
                keep.add(x)
                stack.extend(children.get(x, []))
    # parents of everything kept
    for x in list(keep):
        while x in by_id and by_id[x]["ctrl_deps"] not in keep and by_id[x]["ctrl_deps"] in by_id:
            x = by_id[x]["ctrl_deps"]
            keep.add(x)
    out = [l.rstrip().rstrip(",") for l, n in zip(nodes, parsed) if n["id"] in keep]
    out = [l + "," for l in out[:-1]] + out[-1:]
    foot = "\n".join(foot)
    # the footer's counts follow the nodes kept (validate checks nodes_written)
    threads = sum(1 for n in parsed if n["id"] in keep and n["name"].endswith("|thread]"))
    for key, val in (("nodes_written", len(out)), ("ops_recorded", len(out) - threads - 1),
                     ("threads", threads)):
        foot = re.sub(r'"%s": \d+' % key, '"%s": %d' % (key, val), foot, count=1)
    return "\n".join(head + out) + "\n" + foot


def variants(data):
    """Truncated and mangled copies of one trace's bytes."""
    n = len(data)
    out = []
    for frac in (0.37, 0.81):
        out.append(data[: int(n * frac)])
    nodes_at = data.find(b'"nodes"')
    out.append(data[: nodes_at + 12])
    out.append(data.replace(b"},", b"}", 1))                  # missing comma
    out.append(data.replace(b'"name": "', b'"name": "\xff\xc3(', 1))  # invalid UTF-8
    out.append(data.replace(b'"ctrl_deps": ', b'"ctrl_deps": 99999', 1))  # missing parent
    out.append(data.replace(b'"value": 0', b'"value": 18446744073709551616', 1))
    out.append(data.replace(b'"values": [', b'"values": [' + b"[" * 40, 1))
    out.append(data.replace(b'"id": ', b'"id": -', 1))
    out.append(gzip.compress(data, mtime=0))
    return out


def main():
    args = sys.argv[1:]
    if args and args[0] == "--slices":
        outdir = args[1]
        os.makedirs(outdir, exist_ok=True)
        for k, path in enumerate(args[2:]):
            raw = open(path, "rb").read()
            if raw[:2] == b"\x1f\x8b":
                write(outdir, raw[:8192], 0)  # a truncated gzip stream
                raw = gzip.decompress(raw)
            for m, size in enumerate((2048, 8192, 24576)):
                write(outdir, raw[:size], MODES[(k + m) % len(MODES)])
        return
    outdir = args[0]
    os.makedirs(outdir, exist_ok=True)
    for k, path in enumerate(args[1:]):
        text = open(path, encoding="utf-8", errors="surrogateescape").read()
        try:
            small = reduce_trace(text).encode("utf-8", "surrogateescape")
        except (StopIteration, ValueError, KeyError):
            small = text.encode("utf-8", "surrogateescape")  # not in etr's layout: as is
        if len(small) > 16384:
            small = small[:16384]
        write(outdir, small, MODES[k % len(MODES)])
        write(outdir, small, 2)
        for v, data in enumerate(variants(small)):
            write(outdir, data, MODES[(k + v) % len(MODES)])


if __name__ == "__main__":
    main()
