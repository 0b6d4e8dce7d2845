#!/usr/bin/env python3
"""Test of `etr symbolize` on a hand-made module-mode trace.

The fixture is generated here, at test time, from test libraries of this build: frames of
the 20k-function library (known names, files and lines), one of libsymchain.so recorded at a
path that does not exist (found through --search-dir by basename, build-id checked), one with
a wrong build-id (not trusted: left as it was), one of a module that exists nowhere, and a
script frame without a module (copied), and twice the same frame of libsymchain.so's call
made from inlined code (two levels: it expands into three frames, as `addr2line -i` gives
them, written once; the expected lines come from the library's __LINE__ markers). The
output must resolve exactly the module frames it can, copy everything else (header, nodes,
the "etr" footer), and renumber "tracebacks" to the expanded frames.

Real PyTorch traces (REAL_DIR, optional: skipped when absent) must come out equal to
their input (nothing to resolve; everything copied, numbers keeping their types).

usage: test_cli_symbolize.py ETR LIB20K SYMCHAIN WORKDIR [REAL_DIR]
"""
import ctypes
import gzip
import json
import os
import re
import subprocess
import sys


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], check=True, capture_output=True, text=True)
    m = re.search(r"Build ID: ([0-9a-f]+)", out.stdout)
    assert m, "no build id in " + path
    return m.group(1)


def symbols(path):
    out = subprocess.run(["nm", "--defined-only", path], check=True, capture_output=True,
                         text=True)
    syms = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = int(parts[0], 16)
    return syms


def node(nid, name, parent, extra_attrs=()):
    attrs = [
        {"name": "rf_id", "type": "uint64", "value": nid},
        {"name": "fw_parent", "type": "uint64", "value": 0},
        {"name": "seq_id", "type": "int64", "value": -1},
        {"name": "scope", "type": "uint64", "value": 0},
        {"name": "tid", "type": "uint64", "value": 1},
        {"name": "fw_tid", "type": "uint64", "value": 0},
        {"name": "op_schema", "type": "string", "value": ""},
        {"name": "kernel_backend", "type": "string", "value": ""},
        {"name": "kernel_file", "type": "string", "value": ""},
    ] + list(extra_attrs)
    return {"id": nid, "name": name, "ctrl_deps": parent,
            "inputs": {"values": [1.5, 2.0, "x\u00e9\"\\", True, "<None>"], "shapes": [[], [], [], [], []],
                       "types": ["Double", "Double", "String", "Bool", "None"],
                       "strides": [[], [], [], [], []]},
            "outputs": {"values": [], "shapes": [], "types": [], "strides": []},
            "ts": 10 + nid, "inclusive_dur": 3, "exclusive_dur": 2, "attrs": attrs}


def inlined_call(path):
    """Offset of the indirect call in symchain_c (made from code inlined twice into it)."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], check=True,
                         capture_output=True, text=True).stdout
    body = out.split("<symchain_c>:\n", 1)[1].split("\n\n", 1)[0]
    calls = [l for l in body.splitlines() if re.search(r"\bcall", l)]
    assert len(calls) == 1, body
    return int(calls[0].split(":")[0], 16)


def inlined_chain(path):
    """The frames of that call, innermost first: (name, line) from the library's own
    __LINE__ markers, read after running its chain once (the library has no sanitizer)."""
    lib = ctypes.CDLL(path)
    cb_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)
    cb = cb_type(lambda x: x + 1)
    lib.symchain_a.argtypes = [ctypes.c_int, cb_type]
    assert lib.symchain_a(1, cb) == 28
    lines = (ctypes.c_int * 3).in_dll(lib, "symchain_lines")
    inl = (ctypes.c_int * 2).in_dll(lib, "symchain_inl_lines")
    return [("symchain_inl2", inl[1]), ("symchain_inl", inl[0]), ("symchain_c", lines[2])]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def sections(path):
    """{name: (address, size)} of the sections of an ELF file."""
    out = subprocess.run(["readelf", "-SW", path], check=True, capture_output=True,
                         text=True).stdout
    secs = {}
    for m in re.finditer(r"\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", out):
        secs[m.group(1)] = (int(m.group(2), 16), int(m.group(3), 16))
    return secs


def past_the_last_symbol(etr, symchain, work):
    """An address past every symbol of a module (beyond its code, or far beyond its end) has
    no symbol: the frame stays as it was and counts as unresolved. Before: the last symbol,
    _fini, has size 0 and was taken to reach every higher address, so offsets 0x80000000,
    2^63 - 1, 2^64 - 1 all became "_fini". An address inside _fini's own section (.fini)
    still resolves to it."""
    bid = build_id(symchain)
    fini = symbols(symchain)["_fini"]
    start, size = sections(symchain)[".fini"]
    assert start == fini, (start, fini)
    inside = fini + size - 1
    offsets = [start + size + 0x40, 1 << 20, 2**31, 2**63 - 1, 2**64 - 1]
    # (each with its build id, and without the key: not checked)
    frames = [{"name": "libsymchain.so+0x%x" % off, "filename": symchain, "line": 0,
               "module": symchain, "build_id": b, "offset": off}
              for off in [inside] + offsets for b in (bid, None)]
    for fr in frames:
        if fr["build_id"] is None:
            del fr["build_id"]
    trace = {
        "schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 0,
        "nodes": [node(3, "a", 2, [{"name": "traceback", "type": "uint64", "value": 0}]),
                  node(2, "[pytorch|profiler|execution_trace|thread]", 1),
                  node(1, "[pytorch|profiler|execution_trace|process]", 1)],
        "finish_ts": 1, "frames": frames, "tracebacks": [list(range(len(frames)))]}
    src = os.path.join(work, "far.json")
    out = os.path.join(work, "far.out.json")
    with open(src, "w") as f:
        json.dump(trace, f)
    r = run([etr, "symbolize", src, "-o", out])
    assert r.returncode == 0, r.stderr
    assert "2 frames resolved, %d unresolved" % (2 * len(offsets)) in r.stderr, r.stderr
    with open(out) as f:
        got = json.load(f)["frames"]
    assert [fr["name"] for fr in got[:2]] == ["_fini", "_fini"], got[:2]
    assert got[2:] == frames[2:], [fr["name"] for fr in got]


def main():
    etr, lib20k, symchain, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    s20 = symbols(lib20k)
    bid20 = build_id(lib20k)
    bidc = build_id(symchain)
    sc = symbols(symchain)
    want = {}
    frames = []
    for i in (0, 2500, 12345, 19999):
        name = "etr_sym20k_f%d" % i
        off = s20[name] + 1
        want[len(frames)] = (name, "/sym20k_%d.c" % (i // 2500), i % 2500 + 3)
        frames.append({"name": "libetrsym20k.so+0x%x" % off, "filename": lib20k, "line": 0,
                       "module": lib20k, "build_id": bid20, "offset": off})
    # Recorded elsewhere: found by basename under --search-dir (build-id matches).
    moved = "/nonexistent/elsewhere/" + os.path.basename(symchain)
    want[len(frames)] = ("symchain_b", "/symchain.c", None)
    frames.append({"name": "x", "filename": moved, "line": 0, "module": moved,
                   "build_id": bidc, "offset": sc["symchain_b"] + 2})
    # Wrong build-id: not trusted, the frame stays as it was.
    wrong = {"name": "libetrsym20k.so+0x10", "filename": lib20k, "line": 0, "module": lib20k,
             "build_id": "00" * 20, "offset": s20["etr_sym20k_f7"]}
    frames.append(wrong)
    gone = {"name": "libgone.so+0x40", "filename": "/nonexistent/libgone.so", "line": 0,
            "module": "/nonexistent/libgone.so", "build_id": "", "offset": 64}
    frames.append(gone)
    script = {"name": "forward", "filename": "model.py", "line": 17}
    frames.append(script)
    # The call made from inlined code, recorded twice (the same frame: one expansion).
    off = inlined_call(symchain)
    chain = inlined_chain(symchain)
    inl = {"name": "libsymchain.so+0x%x" % off, "filename": symchain, "line": 0,
           "module": symchain, "build_id": bidc, "offset": off}
    n_in = len(frames)
    frames += [inl, dict(inl)]

    trace = {
        "schema": "1.1.1-chakra.0.0.4", "pid": 4242, "time": "2024-05-06 07:08:09",
        "start_ts": 123,
        "nodes": [
            node(3, "aten::mul", 2, [{"name": "traceback", "type": "uint64", "value": 0}]),
            node(2, "[pytorch|profiler|execution_trace|thread]", 1),
            node(1, "[pytorch|profiler|execution_trace|process]", 1),
        ],
        "finish_ts": 456,
        "frames": frames,
        "tracebacks": [list(range(len(frames))), [n_in, 4], [n_in + 1]],
        "etr": {"version": "0.1.0", "stats": {"nodes_written": 3}, "other": [None, -7, 1e300]},
    }
    src = os.path.join(work, "module-mode.json")
    with open(src, "w") as f:
        json.dump(trace, f, indent=1, ensure_ascii=False)
    out = os.path.join(work, "resolved.json")
    if os.path.exists(out):
        os.unlink(out)

    r = run([etr, "symbolize", src, "-o", out, "--search-dir", "/nonexistent-dir",
             "--search-dir", os.path.dirname(symchain)])
    assert r.returncode == 0, r.stderr
    assert ("7 frames resolved, 2 unresolved (9 with a module, of 10 frames), "
            "4 inlined frames added") in r.stderr, r.stderr
    with open(out) as f:
        res = json.load(f)

    def check(res):
        assert list(res.keys()) == list(trace.keys()), list(res.keys())
        for k in ("schema", "pid", "time", "start_ts", "finish_ts", "etr"):
            assert res[k] == trace[k], (k, res[k], trace[k])
        # Input frames n_in and n_in + 1 are one frame expanded into three (n_in..n_in+2).
        x = [n_in, n_in + 1, n_in + 2]
        assert res["tracebacks"] == [list(range(n_in)) + x + x, x + [4], x], res["tracebacks"]
        assert res["nodes"] == trace["nodes"]
        # Doubles stay doubles ("2.0", not "2").
        assert isinstance(res["nodes"][0]["inputs"]["values"][1], float)
        assert len(res["frames"]) == n_in + 3, res["frames"]
        for k, (name, line) in enumerate(chain):
            fr = res["frames"][n_in + k]
            assert (fr["name"], fr["line"]) == (name, line), (k, fr, chain)
            assert fr["filename"].endswith("/symchain.c"), fr
            assert {k2: fr[k2] for k2 in ("module", "build_id", "offset")} == {
                k2: inl[k2] for k2 in ("module", "build_id", "offset")}, fr
        for i, fr in enumerate(res["frames"][:n_in]):
            if i in want:
                name, fsuffix, line = want[i]
                assert fr["name"] == name, (i, fr)
                assert fr["filename"].endswith(fsuffix), (i, fr)
                if line is not None:
                    assert fr["line"] == line, (i, fr)
                else:
                    assert fr["line"] > 0, (i, fr)
                for k in ("module", "build_id", "offset"):
                    assert fr[k] == frames[i][k], (i, k, fr)
                assert list(fr.keys())[:3] == ["name", "filename", "line"]
            else:
                assert fr == frames[i], (i, fr, frames[i])

    check(res)

    # stdin to stdout, gzip input.
    gz = os.path.join(work, "module-mode.json.gz")
    with open(src, "rb") as f, gzip.open(gz, "wb") as g:
        g.write(f.read())
    with open(gz, "rb") as f:
        r = subprocess.run([etr, "symbolize", "-d", os.path.dirname(symchain), "-"], stdin=f,
                           capture_output=True)
    assert r.returncode == 0, r.stderr
    check(json.loads(r.stdout))

    # Without the search dir the moved library stays unresolved.
    r = run([etr, "symbolize", src, "-o", out])
    assert r.returncode == 0, r.stderr
    assert "6 frames resolved, 3 unresolved" in r.stderr, r.stderr

    # Errors: one line naming the file and byte offset; usage errors exit 2.
    bad = os.path.join(work, "bad.json")
    with open(bad, "w") as f:
        f.write('{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [{"id": 1,,}]}')
    os.unlink(out)
    r = run([etr, "symbolize", bad, "-o", out])
    assert r.returncode == 1, r
    assert r.stderr.count("\n") == 1 and "bad.json" in r.stderr and "byte" in r.stderr, r.stderr
    assert not os.path.exists(out), "partial output left behind"
    r = run([etr, "symbolize", "/nonexistent/trace.json", "-o", out])
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r
    r = run([etr, "symbolize"])
    assert r.returncode == 2, r
    r = run([etr, "symbolize", src, "--bogus"])
    assert r.returncode == 2, r
    r = run([etr, "symbolize", src, "-o", src])
    assert r.returncode == 1 and "overwrite" in r.stderr, r
    r = run([etr, "symbolize", "--help"])
    assert r.returncode == 0 and "usage: etr symbolize" in r.stdout, r

    past_the_last_symbol(etr, symchain, work)

    real = sys.argv[5] if len(sys.argv) > 5 else ""
    n_real = 0
    if real and os.path.isdir(real):
        for name in sorted(os.listdir(real)):
            if not (name.endswith(".json") or name.endswith(".json.gz")):
                continue
            path = os.path.join(real, name)
            r = run([etr, "symbolize", path, "-o", out])
            assert r.returncode == 0, r.stderr
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt") as f:
                want_trace = json.load(f)
            with open(out) as f:
                got = json.load(f)
            assert got == want_trace, name
            assert list(got.keys()) == list(want_trace.keys()), name
            n_real += 1
    print("ok (%d real traces copied)" % n_real)


if __name__ == "__main__":
    main()
