#!/bin/sh
# libetr.so must not impose libunwind on the runtimes that load it: no libunwind in its
# NEEDED entries, and no unw_*, _U* (libunwind's and the C++ ABI's unwinder) or backtrace
# symbols among its dynamic symbols, defined or undefined.
set -u
lib=$1
NM=${NM:-nm}
READELF=${READELF:-readelf}
fail=0
needed=$("$READELF" -d "$lib") || { echo "readelf failed on $lib"; exit 1; }
if printf '%s\n' "$needed" | grep -i 'NEEDED.*unwind'; then
  echo "FAIL: $lib needs libunwind"
  fail=1
fi
syms=$("$NM" -D "$lib") || { echo "nm failed on $lib"; exit 1; }
bad=$(printf '%s\n' "$syms" | awk '{print $NF}' | grep -E '^(unw_|_U|_Unwind|backtrace)' || true)
if [ -n "$bad" ]; then
  echo "FAIL: $lib has libunwind/backtrace symbols:"
  printf '%s\n' "$bad"
  fail=1
fi
[ "$fail" = 0 ] && echo "ok: $lib neither needs nor exports libunwind"
exit $fail
