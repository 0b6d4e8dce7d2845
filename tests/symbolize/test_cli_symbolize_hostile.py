#!/usr/bin/env python3
"""`etr symbolize` and `etr flame` on hostile traceback tables (findings-21).

- A "tracebacks" entry past the end of "frames" stays past the end of the rebuilt table (it
  was copied as it was, and once inlined calls made the table longer it named one of them),
  with a note on stderr.
- A module path with a NUL names no file: it is not looked up (it was, up to the NUL, and
  named the frame after that other file).
- A module recorded without a build id ("build_id": "") is resolved only from a file that
  has none either (a file with one is another build; it was used, with its names).
- Module paths that are a FIFO, a directory, /dev/zero, a large sparse file or do not exist,
  offsets at the ends of the range, frames and indices of the wrong types: no hang, no
  crash, exit 0, the frames left as they were.
- A stripped module without a build id takes its names and lines from its .gnu_debuglink
  file only when that file's CRC is the one the link records (a stale debug file of
  another build gave that build's names: symchain_b's address became symchain_inl /
  symchain_c of the -O0 build).
- `etr flame`: stack elements that name no frame are shown ([frame N], [frame ?]) and
  counted, not left out or taken as frame 1.
- A search dir so long that "dir/name" does not fit in PATH_MAX is not looked up there (the
  path cut short named another file, which was taken when it had no build id either).

usage: test_cli_symbolize_hostile.py ETR SYMCHAIN SYMCHAIN_O0 WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m.group(1) if m else ""


def func_offset(path, name):
    out = subprocess.run(["nm", path], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[2] == name:
            return int(p[0], 16)
    raise AssertionError(name)


def inlined_call(path):
    """Offset of the indirect call in symchain_c (made from code inlined twice into it)."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], check=True,
                         capture_output=True, text=True).stdout
    body = out.split("<symchain_c>:\n", 1)[1].split("\n\n", 1)[0]
    calls = [l for l in body.splitlines() if re.search(r"\bcall", l)]
    assert len(calls) == 1, body
    return int(calls[0].split(":")[0], 16)


def node(nid, name, parent, tb=None):
    attrs = [{"name": "rf_id", "type": "uint64", "value": nid}]
    if tb is not None:
        attrs.append({"name": "traceback", "type": "uint64", "value": tb})
    return {"id": nid, "name": name, "ctrl_deps": parent,
            "inputs": {"values": [], "shapes": [], "types": []},
            "outputs": {"values": [], "shapes": [], "types": []}, "attrs": attrs}


def trace(frames, tracebacks):
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "2024-05-06 07:08:09",
            "start_ts": 1,
            "nodes": [node(3, "aten::mul", 2, 0),
                      node(2, "[pytorch|profiler|execution_trace|thread]", 1),
                      node(1, "[pytorch|profiler|execution_trace|process]", 1)],
            "finish_ts": 2, "frames": frames, "tracebacks": tracebacks}


def frame(mod, off, bid):
    return {"name": "m+0x%x" % off if isinstance(off, int) and off >= 0 else "m",
            "filename": mod, "line": 0, "module": mod, "build_id": bid, "offset": off}


def symbolize(etr, work, name, t, timeout=60):
    src = os.path.join(work, name + ".json")
    out = os.path.join(work, name + ".out.json")
    with open(src, "w") as f:
        json.dump(t, f)
    r = subprocess.run([etr, "symbolize", src, "-o", out], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, (name, r.stderr)
    with open(out) as f:
        return json.load(f), r.stderr


def main():
    etr, symchain, other_build, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    bid = build_id(symchain)
    assert bid

    # 1. Indices past the table: one input frame that expands into three (inlined calls).
    off = inlined_call(symchain)
    res, err = symbolize(etr, work, "past_end",
                         trace([frame(symchain, off, bid)], [[0, 1, 2, -1, "x"], [7]]))
    assert [f["name"] for f in res["frames"]] == ["symchain_inl2", "symchain_inl",
                                                  "symchain_c"], res["frames"]
    n = len(res["frames"])
    assert res["tracebacks"] == [[0, 1, 2, n, n + 1, -1, "x"], [n + 6]], res["tracebacks"]
    assert "4 traceback entries name no frame" in err, err

    # 2. A module path with a NUL: not looked up (not named after the path before the NUL).
    f_off = func_offset(symchain, "symchain_b") + 2
    nul = frame(symchain + "\u0000x", f_off, "")
    res, err = symbolize(etr, work, "nul", trace([nul], [[0]]))
    assert res["frames"] == [nul], res["frames"]
    ok = frame(symchain, f_off, bid)  # (the same path without the NUL is resolved)
    res, err = symbolize(etr, work, "no_nul", trace([ok], [[0]]))
    assert res["frames"][0]["name"] == "symchain_b", res["frames"]

    # 3. A module recorded without a build id ("build_id": "") is not resolved from a file
    # that has one (another build: it was, with that build's names); a file without one is
    # used, and so is any file when the trace does not say (no "build_id" key).
    nobid = os.path.join(work, "libsymchain-nobid.so")
    subprocess.run(["objcopy", "--remove-section", ".note.gnu.build-id", symchain, nobid],
                   check=True)
    assert build_id(nobid) == ""
    had = frame(symchain, f_off, "")
    res, err = symbolize(etr, work, "bid_recorded_none", trace([had], [[0]]))
    assert res["frames"] == [had], res["frames"]
    assert "0 frames resolved, 1 unresolved" in err, err
    none = frame(nobid, f_off, "")
    unknown = {k: v for k, v in frame(symchain, f_off, "").items() if k != "build_id"}
    res, err = symbolize(etr, work, "bid_none", trace([none, unknown], [[0, 1]]))
    assert [f["name"] for f in res["frames"]] == ["symchain_b", "symchain_b"], res["frames"]
    # (found by basename under a search dir too: only a file without a build id)
    moved = frame("/nonexistent/" + os.path.basename(symchain), f_off, "")
    src = os.path.join(work, "bid_moved.json")
    with open(src, "w") as f:
        json.dump(trace([moved], [[0]]), f)
    r = subprocess.run([etr, "symbolize", src, "-d", os.path.dirname(symchain)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["frames"] == [moved], r

    # 4. Module paths that are no ELF file, offsets at the ends of the range, wrong types.
    fifo = os.path.join(work, "fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    big = os.path.join(work, "big")
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # (sparse)
    odd = [frame(p, 16, "") for p in (fifo, work, "/dev/zero", big, "/nonexistent/lib.so",
                                      "", "\n\u00ff")]
    odd += [frame(symchain, o, bid) for o in (0, 2**63, 2**64 - 1)]
    odd += [frame(symchain, o, bid) for o in (-1, 1.5, "16", None)]
    odd += [5, None, "s", [1], {"module": 5, "offset": 3}, {"offset": 3}]
    res, err = symbolize(etr, work, "odd", trace(odd, [list(range(len(odd)))]))
    for i, (a, b) in enumerate(zip(res["frames"], odd)):
        if i in (7, 8, 9):  # (symchain offsets 0 and beyond its end: no symbol there)
            assert a["offset"] == b["offset"] and a["module"] == b["module"], (i, a)
        else:
            assert a == b, (i, a, b)
    assert res["tracebacks"] == [list(range(len(odd)))], res["tracebacks"]
    os.unlink(big)

    # 5. A stale .gnu_debuglink file of a module without a build id is not used.
    dl = os.path.join(work, "dl")
    os.makedirs(dl, exist_ok=True)
    lib, dbg = os.path.join(dl, "libdl.so"), os.path.join(dl, "libdl.debug")
    nonote = ["--remove-section", ".note.gnu.build-id"]
    subprocess.run(["objcopy", "--only-keep-debug"] + nonote + [symchain, dbg], check=True)
    subprocess.run(["objcopy", "--strip-all"] + nonote +
                   ["--add-gnu-debuglink=" + dbg, symchain, lib], check=True)
    fr = frame(lib, f_off, "")
    res, err = symbolize(etr, work, "debuglink", trace([fr], [[0]]))
    assert [(f["name"], f["line"] > 0) for f in res["frames"]] == [("symchain_b", True)], res
    subprocess.run(["objcopy", "--only-keep-debug"] + nonote + [other_build, dbg], check=True)
    res, err = symbolize(etr, work, "debuglink_stale", trace([fr], [[0]]))
    # (the name from the stripped file's .dynsym, no line)
    assert [(f["name"], f["line"]) for f in res["frames"]] == [("symchain_b", 0)], res

    # 6. etr flame on a stack with elements that name no frame: each one shown, and counted
    # (-1 and "x" were left out, 1.5 and true named frame 1).
    fl = trace([{"name": "inner", "filename": "a.c", "line": 1},
                {"name": "outer", "filename": "b.c", "line": 2}],
               [[0, -1, "x", 9, 1.5, True, 1]])
    src = os.path.join(work, "flame.json")
    with open(src, "w") as f:
        json.dump(fl, f)
    r = subprocess.run([etr, "flame", src], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("outer;[frame ?];[frame ?];[frame 9];[frame ?];[frame ?];inner;"
                        "aten::mul 1\n"), r.stdout
    assert "5 frame reference(s)" in r.stderr, r.stderr

    # 7. A search dir so long that "dir/name" does not fit in PATH_MAX: not looked up (cut
    # short, the path named another file, "dir/libx." here, which was taken).
    path_max = os.pathconf("/", "PC_PATH_MAX")
    deep = os.path.abspath(os.path.join(work, "deep"))
    want = path_max - 1 - len("/libx.so") + 2  # (so that "deep.../libx." is what fits)
    parts, left = [], want - len(deep)
    while left > 0:
        n = min(200, left - 1) if left > 201 else left - 1
        parts.append("d" * n)
        left -= n + 1
    longdir = deep + "".join("/" + p for p in parts)
    assert len(longdir) == want, (len(longdir), want)
    os.makedirs(longdir, exist_ok=True)
    shutil.copyfile(nobid, longdir + "/libx.")
    assert len(longdir + "/libx.") == path_max - 1
    far = frame("/nonexistent/libx.so", f_off, "")
    src = os.path.join(work, "longdir.json")
    with open(src, "w") as f:
        json.dump(trace([far], [[0]]), f)
    r = subprocess.run([etr, "symbolize", src, "-d", longdir], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["frames"] == [far], r
    shorter = os.path.dirname(longdir)  # (the same file in a shorter dir: found)
    shutil.copyfile(nobid, shorter + "/libx.so")
    r = subprocess.run([etr, "symbolize", src, "-d", shorter], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["frames"][0]["name"] == "symchain_b", r.stdout
    print("ok")


if __name__ == "__main__":
    main()
