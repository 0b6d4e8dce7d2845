#!/usr/bin/env python3
"""Check the names of the tracebacks test_reload wrote (test_reload.c, names MODE): an op
recorded through one build of the plugin must never be named after the other build's
function, and the builds that were loaded, or on disk unchanged, when the writer symbolized
them must be named.

usage: check_reload.py TEST_RELOAD MODE WORKDIR LIB_A LIB_B
(runs `TEST_RELOAD names MODE WORKDIR/MODE.json WORKDIR/libplug-MODE.so LIB_A LIB_B` first)
"""
import json
import os
import subprocess
import sys

NAMES = {"A": "reload_fn_alpha", "B": "reload_fn_bravo"}


def main():
    exe, mode, work, lib_a, lib_b = sys.argv[1:6]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, mode + ".json")
    plugin = os.path.join(work, "libplug-%s.so" % mode)
    subprocess.run([exe, "names", mode, path, plugin, lib_a, lib_b], check=True)
    d = json.load(open(path))
    frames, tbs = d["frames"], d["tracebacks"]
    seen = {}
    for n in d["nodes"]:
        if not n["name"].startswith("op_"):
            continue
        attrs = {a["name"]: a["value"] for a in n.get("attrs", [])}
        assert "traceback" in attrs, "op %s has no traceback" % n["name"]
        names = [frames[i]["name"] for i in tbs[attrs["traceback"]]]
        seen.setdefault(n["name"], []).append(names)
    # which ops must be named by their own build (else a module+offset fallback is allowed)
    must = {"noflush": ["op_B"], "flush": ["op_A", "op_B"],
            "stale": ["op_A", "op_B2"], "deleted": ["op_A", "op_B"], "traces": ["op_B"]}[mode]
    bad = []
    for op, stacks in sorted(seen.items()):
        build = op[3]
        own, other = NAMES[build], NAMES["B" if build == "A" else "A"]
        for names in stacks:
            if other in names:
                bad.append("%s (build %s) named %s: %s" % (op, build, other, names))
            if op in must and own not in names:
                bad.append("%s (build %s) not named %s: %s" % (op, build, own, names))
    want = {"noflush": 6, "flush": 6, "stale": 9, "deleted": 6, "traces": 3}[mode]
    got = sum(len(v) for v in seen.values())
    if got != want:
        bad.append("%d ops with a traceback, expected %d" % (got, want))
    for b in bad:
        print(b)
    if bad:
        sys.exit(1)
    print("ok: %d ops, %s" % (got, ", ".join("%s: %s" % (k, v[0][:4]) for k, v in
                                               sorted(seen.items()))))


if __name__ == "__main__":
    main()
