#!/usr/bin/env python3
"""Writes data/chrome_edge.json (timed) and data/chrome_edge_untimed.json: edge values for the
writers of `etr chrome` (tools/chrome_out.c): integers at the int64 / uint64 limits, times
clamped, negative, with ns fractions; doubles; strings with escapes, control characters, NUL,
valid and invalid UTF-8, longer than one 4096-byte piece with a sequence across its end;
inputs with their keys out of order, twice or missing; untimed flows.

Their expected exports (data/chrome_edge*.chrome.json) were written by `etr chrome` at fee8102,
before chrome_out.c: test_analysis_cli.py (fixtures) compares the export byte for byte. The
timed ones were written again when a top-level op that ends no batch of its thread came to be
written as it is (2026-11-26): the same events, "huge neg ts" (a child of another thread's
op) now last; and again when chrome came to lay out each op by its own timing: the
"untimed op" of the timed trace, left out before, is now a 1 us slice at 0 on its thread,
and otherData.timing says "mixed: ...". All were written again when doubles came to be
written in their shortest form that reads back the same (2026-11-27: 2.5e-07, not
2.4999999999999999e-07; -0.0, not -0, which a reader takes for the int 0).
usage: make_chrome_edge.py OUT_DIR"""
import os
import sys

out = sys.argv[1]

def base(rf=0, fwp=0, seq=-1, scope=0, tid=1, fwt=0, schema="", kb="", kf=""):
    return [("rf_id", "uint64", rf), ("fw_parent", "uint64", fwp), ("seq_id", "int64", seq),
            ("scope", "uint64", scope), ("tid", "uint64", tid), ("fw_tid", "uint64", fwt),
            ("op_schema", "string", schema), ("kernel_backend", "string", kb),
            ("kernel_file", "string", kf)]

def enc(v):
    if isinstance(v, bytes):
        return v  # raw JSON text
    if isinstance(v, bool):
        return b"true" if v else b"false"
    if isinstance(v, int):
        return str(v).encode()
    if isinstance(v, str):
        return b'"' + v.encode("utf-8", "surrogatepass") + b'"'  # caller escapes
    raise TypeError(v)

def attrs(lst):
    return b"[" + b",".join(b'{"name": ' + enc(n) + b', "type": ' + enc(t) + b', "value": ' + enc(v) + b"}" for n, t, v in lst) + b"]"

EMPTY_IO = b'{"values": [], "shapes": [], "types": [], "strides": []}'

def node(id_, name, ctrl, at, ins=EMPTY_IO, outs=EMPTY_IO, timing=None):
    s = b'{"id": ' + enc(id_) + b', "name": ' + (name if isinstance(name, bytes) else enc(name)) + b', "ctrl_deps": ' + enc(ctrl)
    s += b', "inputs": ' + ins + b', "outputs": ' + outs
    if timing is not None:
        ts, inc, exc = timing
        s += b', "ts": ' + enc(ts) + b', "inclusive_dur": ' + enc(inc) + b', "exclusive_dur": ' + enc(exc)
    return s + b', "attrs": ' + attrs(at) + b"}"

def trace(nodes, pid=b"77"):
    return (b'{"schema": "1.1.1-chakra.0.0.4", "pid": ' + pid + b', "time": "2026-01-01 00:00:00", "start_ts": 0,\n "nodes": [\n  '
            + b",\n  ".join(nodes) + b'\n ],\n "finish_ts": 100}\n')

THREAD = "[pytorch|profiler|execution_trace|thread]"
PROC = "[pytorch|profiler|execution_trace|process]"
long_name = ("x" * 4093 + "\u20ac" + "y" * 100 + "\\u0001" + "z" * 5000)  # a sequence across 4096
weird = b'"q\\"uo\\\\te \\u0000nul \\u0001\\u001f\\u007f\\n\\t\\r \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 bad:\x80\xff\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80 \\ud800 cut:\xe2\x82"'
words = b'"0123456\\"89abcdef\\u0002hijklmnopqrstu\xc3vwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_long_enough"'
io1 = b'{"values": [[1,2,0,6,4,"cpu"], 3.5, "s", null, true], "shapes": [[2,3],[],[],[],[]], "types": ["Tensor(float)","Double","String","None","Bool"], "strides": [[3,1],[],[],[],[]]}'
io_odd = b'{"types": ["Int", "x\\u0003y"], "shapes": [[-9223372036854775808, 18446744073709551615], [1e300, -0.0, 5e-324, 0.1, 1.7976931348623157e308, 123456789012345678901234567890]], "values": [1, 2], "shapes": "dup"}'
io_noshapes = b'{"values": [], "types": ["Int"]}'
def timed():
    n = []
    n.append(node(2, THREAD, 1, base(scope=7, tid=1) + [("os_tid", "uint64", 4242), ("thread_name", "string", "main \u00e9\\u0001")]))
    n.append(node(3, THREAD, 1, base(scope=7, tid=2) + [("thread_name", "string", "t" * 150)]))
    n.append(node(10, b'"leaf"', 11, base(rf=5, seq=0), ins=io1, timing=(0, 0, 0)))
    n.append(node(12, weird, 11, base(rf=18446744073709551615, seq=9223372036854775807, scope=1, fwp=10, fwt=1, schema="s\\u0005chema \u00e9", kb="cuda", kf="k.py"), ins=io_odd, outs=io_noshapes, timing=(5, 3, 2)))
    n.append(node(13, words, 11, base(rf=7, seq=-9223372036854775808, scope=2) + [("ts_ns", "uint64", 5001001), ("dur_ns", "uint64", 999), ("dbl", "double", b"2.5e-7"), ("big", "uint64", 18446744073709551615), ("neg", "int64", -9223372036854775808), ("obj", "json", b'{"a\\u0000b": [1, {"c": null}], "": false}'), ("nan", "string", "nan")], timing=(5, 1, 1)))
    n.append(node(14, long_name, 11, base(rf=8, scope=7) + [("ts_ns", "uint64", 6000000), ("dur_ns", "uint64", 1000)], timing=(6, 1, 1)))
    n.append(node(15, "neg ts", 11, base(rf=9, scope=99) + [("ts_ns", "int64", -5), ("dur_ns", "double", b"1.5")], timing=(-3, -4, 0)))
    n.append(node(16, "huge ts", 11, base(rf=10), timing=(9223372036854775807, 9223372036854775807, 0)))
    n.append(node(17, "huge neg ts", 11, base(rf=11, fwp=12, fwt=2, scope=1, tid=2), timing=(-9223372036854775808, 1, 1)))
    n.append(node(11, "parent", 2, base(rf=4, seq=3, scope=7), timing=(1, 2, 1)))
    n.append(node(20, "untimed op", 2, base(rf=12)))
    n.append(node(21, "on thread 2", 3, base(rf=13, tid=2, fwp=11, fwt=1, scope=1) + [("tensor_range", "string", "[0, 1)")], ins=b'"not an object"', timing=(40, 2, 2)))
    n.append(node(9223372036854775807, "max id", 3, base(rf=14, tid=2), timing=(50, 1, 1)))
    n.append(node(1, PROC, 1, base(scope=7, tid=0)))
    return trace(n)

def untimed():
    n = []
    n.append(node(30, "bw leaf \u00e9", 31, base(rf=1, fwp=40, fwt=1, scope=1, tid=2), ins=io1))
    n.append(node(31, "bw parent", 3, base(rf=2, fwp=99999, fwt=1, scope=1, tid=2)))
    n.append(node(40, weird, 41, base(rf=3, seq=5), ins=io_odd))
    n.append(node(41, "fw parent", 2, base(rf=4, scope=7)))
    n.append(node(2, THREAD, 1, base(scope=7, tid=1) + [("os_tid", "uint64", 11)]))
    n.append(node(3, THREAD, 1, base(scope=7, tid=2)))
    n.append(node(1, PROC, 1, base(scope=7, tid=0)))
    return trace(n, pid=b"9223372036854775807")

open(os.path.join(out, "chrome_edge.json"), "wb").write(timed())
open(os.path.join(out, "chrome_edge_untimed.json"), "wb").write(untimed())
