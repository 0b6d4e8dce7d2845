#!/usr/bin/env python3
"""`etr symbolize` on a trace whose frames name many distinct module paths.

Each module file is loaded (symbol table built, DWARF indexed) once, shared by every module
path that resolves to the same file, and only a few files are kept loaded at once: memory
does not grow with the number of module paths. Before, each distinct path loaded its own copy
(findings-12 F1: ~17 MB each for libc; 3,000 paths ran out of memory and libdw crashed).

Fixture, made here from the 20k-function library of this build (LIB20K, plenty of DWARF):
  - "one":  N frames of LIB20K at N distinct offsets, all recorded at its own path;
  - "many": the same N frames, frame i recorded at a path of its own: half are absent paths
    (/nonexistent/dir/libI.so) carrying LIB20K's build id, found by build id under a
    --search-dir (DIR/.build-id/xx/rest.debug, a link to LIB20K), half are symlinks to LIB20K;
  - "copies": the same frames spread over COPIES copies of LIB20K (distinct files, same build
    id), interleaved: more files than the symbolizer keeps loaded.
Every run must resolve each frame to the same name, file and line as "one". "many" runs
under an address-space limit (RLIMIT_AS) well under what loading each path once needed;
a tighter limit gives "out of memory" (exit 1), never a crash.

usage: test_cli_symbolize_many.py ETR LIB20K WORKDIR [--no-limit]
(--no-limit: sanitizer builds, whose runtime reserves more address space than any limit)
"""
import json
import os
import re
import resource
import shutil
import subprocess
import sys

N = 600          # frames, and distinct module paths in "many"
COPIES = 12      # distinct files in "copies" (the symbolizer keeps 2 loaded)
LIMIT = 200 << 20  # address space for "many" (the old code needed ~N x 1.4 MB, see below)


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], check=True, capture_output=True, text=True)
    m = re.search(r"Build ID: ([0-9a-f]+)", out.stdout)
    assert m, "no build id in " + path
    return m.group(1)


def functions(path):
    out = subprocess.run(["nm", "--defined-only", path], check=True, capture_output=True,
                         text=True).stdout
    f = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].startswith("etr_sym20k_f"):
            f[int(parts[2][len("etr_sym20k_f"):])] = int(parts[0], 16)
    return f


def node(nid, name, parent, tb=None):
    attrs = [{"name": "rf_id", "type": "uint64", "value": nid},
             {"name": "tid", "type": "uint64", "value": 1}]
    if tb is not None:
        attrs.append({"name": "traceback", "type": "uint64", "value": tb})
    return {"id": nid, "name": name, "ctrl_deps": parent,
            "inputs": {"values": [], "shapes": [], "types": [], "strides": []},
            "outputs": {"values": [], "shapes": [], "types": [], "strides": []},
            "attrs": attrs}


def write_trace(path, frames):
    trace = {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "2026-01-01 00:00:00",
             "start_ts": 0,
             "nodes": [node(3, "aten::op", 2, 0),
                       node(2, "[pytorch|profiler|execution_trace|thread]", 1),
                       node(1, "[pytorch|profiler|execution_trace|process]", 1)],
             "finish_ts": 1, "frames": frames, "tracebacks": [list(range(len(frames)))]}
    with open(path, "w") as f:
        json.dump(trace, f)


def limit_as(nbytes):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    return set_limit


def symbolize(etr, src, out, args=(), limit=None):
    if os.path.exists(out):
        os.unlink(out)
    r = subprocess.run([etr, "symbolize", src, "-o", out] + list(args), capture_output=True,
                       text=True, preexec_fn=limit_as(limit) if limit else None)
    return r


def resolved(etr, src, out, args=(), limit=None):
    """(name, filename, line, offset) of each output frame, and the summary line."""
    r = symbolize(etr, src, out, args, limit)
    assert r.returncode == 0, (src, r.returncode, r.stderr)
    with open(out) as f:
        frames = json.load(f)["frames"]
    return [(fr["name"], fr["filename"], fr["line"], fr["offset"]) for fr in frames], r.stderr


def main():
    etr, lib, work = sys.argv[1:4]
    no_limit = "--no-limit" in sys.argv[4:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    bid = build_id(lib)
    funcs = functions(lib)
    assert len(funcs) == 20000, len(funcs)
    # N distinct offsets spread over the 8 compile units (one function each).
    offs = [funcs[i * (20000 // N)] + 1 for i in range(N)]

    def frame(module, off):
        return {"name": "x+0x%x" % off, "filename": module, "line": 0, "module": module,
                "build_id": bid, "offset": off}

    one = os.path.join(work, "one.json")
    write_trace(one, [frame(lib, off) for off in offs])
    want, summary = resolved(etr, one, os.path.join(work, "one.out.json"))
    assert "%d frames resolved, 0 unresolved" % N in summary, summary
    assert len(want) == N, len(want)
    assert all(w[0].startswith("etr_sym20k_f") and w[2] > 0 for w in want), want[:3]

    # Absent paths found by build id under a search dir, and symlinks.
    dbg = os.path.join(work, "dbg", ".build-id", bid[:2])
    os.makedirs(dbg)
    os.symlink(lib, os.path.join(dbg, bid[2:] + ".debug"))
    links = os.path.join(work, "links")
    os.makedirs(links)
    paths = []
    for i in range(N):
        if i % 2:
            p = os.path.join(links, "lib%d.so" % i)
            os.symlink(lib, p)
        else:
            p = "/nonexistent/dir/lib%d.so" % i
        paths.append(p)
    many = os.path.join(work, "many.json")
    write_trace(many, [frame(p, off) for p, off in zip(paths, offs)])
    args = ["--search-dir", os.path.join(work, "dbg")]
    got, summary = resolved(etr, many, os.path.join(work, "many.out.json"), args,
                            None if no_limit else LIMIT)
    assert "%d frames resolved, 0 unresolved" % N in summary, summary
    assert got == want, [(g, w) for g, w in zip(got, want) if g != w][:3]

    # Far too little address space for even one file: a clear error, not a crash.
    if not no_limit:
        for tight in (24 << 20, 40 << 20):
            r = symbolize(etr, many, os.path.join(work, "tight.out.json"), args, tight)
            assert r.returncode in (0, 1), (tight, r.returncode, r.stderr)
            if r.returncode == 1:
                assert r.stderr.count("\n") == 1 and "out of memory" in r.stderr, r.stderr
                assert not os.path.exists(os.path.join(work, "tight.out.json"))

    # More distinct files than are kept loaded, their frames interleaved.
    copies = os.path.join(work, "copies")
    os.makedirs(copies)
    cpaths = []
    for k in range(COPIES):
        p = os.path.join(copies, "libcopy%d.so" % k)
        shutil.copyfile(lib, p)
        cpaths.append(p)
    cp = os.path.join(work, "copies.json")
    write_trace(cp, [frame(cpaths[i % COPIES], off) for i, off in enumerate(offs)])
    got, summary = resolved(etr, cp, os.path.join(work, "copies.out.json"))
    assert "%d frames resolved, 0 unresolved" % N in summary, summary
    assert got == want, [(g, w) for g, w in zip(got, want) if g != w][:3]
    print("ok%s" % (" (no address-space limit: sanitizer build)" if no_limit else ""))


if __name__ == "__main__":
    main()
