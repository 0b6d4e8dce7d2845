#!/bin/sh
# tests/unit/test_abi.sh — ABI checks of libetr, run by ctest (see CMakeLists.txt here).
#
#   test_abi.sh exports  LIB INCLUDE_DIR        only etr_* leave libetr.so, and every ETR_API
#                                               declaration of the headers is exported
#   test_abi.sh soname   LIB SONAME             SONAME of LIB is exactly SONAME
#   test_abi.sh cxx      CXX INCLUDE_DIR SRC WORK   the headers compile as C++ (-pedantic)
#   test_abi.sh c        CC INCLUDE_DIR SRC WORK    the headers compile as C11 (-pedantic)
#   test_abi.sh disable  CC INCLUDE_DIR SRC WORK    -DETR_DISABLE leaves no reference to etr
#
# Tools: NM and READELF from the environment (CMake passes its own), else nm and readelf.
set -u

NM=${NM:-nm}
READELF=${READELF:-readelf}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Names of the dynamic symbols LIB defines.
defined_symbols() {
  "$NM" -D --defined-only "$1" | awk 'NF >= 3 { print $3 } NF == 2 { print $2 }' |
    sed 's/@.*//' | sort -u
}

check_exports() {
  lib=$1 incdir=$2
  [ -f "$lib" ] || fail "no library at $lib"
  syms=$(defined_symbols "$lib") || fail "$NM -D failed on $lib"
  [ -n "$syms" ] || fail "$lib exports no symbol at all"
  bad=$(printf '%s\n' "$syms" | grep -v '^etr_')
  if [ -n "$bad" ]; then
    echo "symbols exported by $lib without the etr_ prefix:" >&2
    printf '%s\n' "$bad" | sed 's/^/  /' >&2
    fail "$(printf '%s\n' "$bad" | wc -l) symbol(s) outside the etr_ namespace"
  fi
  # Every name declared with ETR_API in the public headers must be exported: a declaration
  # without a definition (or without ETR_API on the definition) is a link error for users.
  declared=$(cat "$incdir"/etr/*.h | grep 'ETR_API' | grep -v '#' |
    sed -n 's/.*[^A-Za-z0-9_]\([A-Za-z_][A-Za-z0-9_]*\)[[:space:]]*[(;].*/\1/p' | sort -u)
  n=$(printf '%s\n' "$declared" | grep -c .)
  [ "$n" -ge 10 ] || fail "found only $n ETR_API declarations in $incdir/etr/*.h (parse error?)"
  missing=""
  for d in $declared; do
    printf '%s\n' "$syms" | grep -qx "$d" || missing="$missing $d"
  done
  [ -z "$missing" ] || fail "declared ETR_API in include/etr/*.h but not exported by $lib:$missing"
  echo "ok: $(printf '%s\n' "$syms" | wc -l) exported symbols, all etr_*; all $n ETR_API declarations exported"
}

check_soname() {
  lib=$1 want=$2
  [ -f "$lib" ] || fail "no library at $lib"
  got=$("$READELF" -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
  [ "$got" = "$want" ] || fail "SONAME of $lib is '${got:-<none>}', expected '$want'"
  echo "ok: SONAME $got"
}

check_cxx() {
  cxx=$1 incdir=$2 src=$3 work=$4
  mkdir -p "$work" || fail "cannot create $work"
  for std in c++11 c++17; do
    "$cxx" -std=$std -Wall -Wextra -Werror -pedantic -I"$incdir" -c "$src" \
      -o "$work/abi_cxx_$std.o" || fail "<etr/etr.h> does not compile as $std with -Wall -Wextra -Werror -pedantic ($cxx)"
  done
  echo "ok: <etr/etr.h> compiles as C++11 and C++17 with -Wall -Wextra -Werror -pedantic"
}

check_c() {
  cc=$1 incdir=$2 src=$3 work=$4
  mkdir -p "$work" || fail "cannot create $work"
  "$cc" -std=c11 -Wall -Wextra -Werror -pedantic -I"$incdir" -c "$src" -o "$work/abi_c.o" ||
    fail "<etr/etr.h> does not compile as C11 with -Wall -Wextra -Werror -pedantic ($cc)"
  echo "ok: <etr/etr.h> compiles as C11 with -Wall -Wextra -Werror -pedantic"
}

check_disable() {
  cc=$1 incdir=$2 src=$3 work=$4
  mkdir -p "$work" || fail "cannot create $work"
  for opt in -O0 -O2; do
    # Control: without ETR_DISABLE the same code must reference the library, otherwise the
    # check below proves nothing.
    "$cc" -std=c11 $opt -I"$incdir" -c "$src" -o "$work/abi_on$opt.o" || fail "compile failed"
    undef=$("$NM" -u "$work/abi_on$opt.o" | awk '{ print $NF }')
    for s in etr__record_prepare etr__record_begin etr__record_end etr__observing; do
      printf '%s\n' "$undef" | grep -qx "$s" ||
        fail "control ($opt): without ETR_DISABLE the object does not reference $s"
    done
    "$cc" -std=c11 $opt -DETR_DISABLE -I"$incdir" -c "$src" -o "$work/abi_off$opt.o" ||
      fail "compile with -DETR_DISABLE failed"
    left=$("$NM" -u "$work/abi_off$opt.o" | awk '{ print $NF }' | grep '^etr')
    [ -z "$left" ] || fail "with -DETR_DISABLE ($opt) the object still references: $(printf '%s\n' "$left" | tr '\n' ' ')"
  done
  echo "ok: -DETR_DISABLE removes every reference to etr (-O0 and -O2); control references it"
}

cmd=${1:-}
[ $# -ge 1 ] && shift
case "$cmd" in
exports) [ $# -eq 2 ] || fail "usage: exports LIB INCLUDE_DIR"; check_exports "$@" ;;
soname) [ $# -eq 2 ] || fail "usage: soname LIB SONAME"; check_soname "$@" ;;
cxx) [ $# -eq 4 ] || fail "usage: cxx CXX INCLUDE_DIR SRC WORK"; check_cxx "$@" ;;
c) [ $# -eq 4 ] || fail "usage: c CC INCLUDE_DIR SRC WORK"; check_c "$@" ;;
disable) [ $# -eq 4 ] || fail "usage: disable CC INCLUDE_DIR SRC WORK"; check_disable "$@" ;;
*) fail "unknown check '$cmd' (exports, soname, cxx, c, disable)" ;;
esac
