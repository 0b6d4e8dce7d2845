#!/bin/sh
# tests/install/run_install_test.sh — build programs against an installed etr, run them.
#
#   run_install_test.sh STEP key=value...
#     build=DIR    the etr build tree (already built)
#     src=DIR      this folder (tests/install)
#     work=DIR     scratch folder; the install goes to WORK/prefix
#     libdir=NAME  CMAKE_INSTALL_LIBDIR (lib)
#     cc=PATH cxx=PATH        compilers for the consumers
#     sanitize=LIST           ETR_SANITIZE of the build ("" when none): consumers use it too
#   STEP is one of
#     install      cmake --install into WORK/prefix and check the installed files
#     cmake-shared consumer-cmake with find_package(etr) + etr::etr, C and C++, run both
#     cmake-static the same with etr::etr_static; the programs must not need libetr.so
#     pkgconfig    app.c / app.cpp built with plain cc / c++ and `pkg-config --cflags --libs etr`
#     python       (python=PATH pydir=DIR) `import etr` from PREFIX/DIR records a trace
#     torch        consumer-torch with find_package(etr COMPONENTS torch) + etr::torch, and
#                  the same app with `pkg-config etr-torch` (when libetr_torch was built)
set -u

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
say() { echo "--> $*"; }

step=${1:-}
[ $# -ge 1 ] && shift
build="" src="" work="" libdir=lib cc=cc cxx=c++ sanitize="" python="" pydir=""
for kv in "$@"; do
  case "$kv" in
  build=*) build=${kv#build=} ;;
  src=*) src=${kv#src=} ;;
  work=*) work=${kv#work=} ;;
  libdir=*) libdir=${kv#libdir=} ;;
  cc=*) cc=${kv#cc=} ;;
  cxx=*) cxx=${kv#cxx=} ;;
  sanitize=*) sanitize=${kv#sanitize=} ;;
  python=*) python=${kv#python=} ;;
  pydir=*) pydir=${kv#pydir=} ;;
  *) fail "unknown argument $kv" ;;
  esac
done
if [ -z "$build" ] || [ -z "$src" ] || [ -z "$work" ]; then
  fail "build=, src= and work= are required"
fi

prefix=$work/prefix
san_flags=""
[ -n "$sanitize" ] && san_flags="-fsanitize=$sanitize -fno-omit-frame-pointer"

# The consumers must find the installed etr and nothing else.
unset CMAKE_PREFIX_PATH PKG_CONFIG_LIBDIR CFLAGS CXXFLAGS LDFLAGS
LD_LIBRARY_PATH=$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

# run_app BINARY NAME: run it with a trace in the scratch folder; the program checks the
# trace itself (non-empty, holds its ops) and exits non-zero otherwise.
run_app() {
  bin=$1 name=$2
  trace=$work/$name.json
  rm -f "$trace"
  "$bin" "$trace" || fail "$name exited with status $?"
  [ -s "$trace" ] || fail "$name wrote no trace at $trace"
}

# The shared-library programs must load the installed libetr.so.0, not another one.
check_uses_prefix() {
  bin=$1
  lib=$(ldd "$bin" | awk '/libetr\.so/ { print $3 }')
  case "$lib" in
  "$prefix"/*) ;;
  *) fail "$bin loads libetr from '${lib:-nowhere}', not from $prefix" ;;
  esac
}

step_install() {
  rm -rf "$work"
  mkdir -p "$work" || fail "cannot create $work"
  say "cmake --install $build --prefix $prefix"
  cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || {
    cat "$work/install.log" >&2
    fail "cmake --install failed"
  }
  for f in include/etr/etr.h include/etr/common.h include/etr/record.h include/etr/trace.h \
    "$libdir/libetr.so" "$libdir/libetr.so.0" "$libdir/libetr.a" \
    "$libdir/cmake/etr/etrConfig.cmake" "$libdir/cmake/etr/etrConfigVersion.cmake" \
    "$libdir/pkgconfig/etr.pc"; do
    [ -e "$prefix/$f" ] || fail "not installed: $f"
  done
  if [ -e "$build/integrations/torch/libetr_torch.so" ]; then # (built: libtorch was found)
    for f in include/etr/torch.h "$libdir/libetr_torch.so" "$libdir/libetr_torch.so.0" \
      "$libdir/cmake/etr/etrTorchTargets.cmake" "$libdir/pkgconfig/etr-torch.pc"; do
      [ -e "$prefix/$f" ] || fail "not installed: $f"
    done
  fi
  # Every public header must be installed.
  for h in "$src"/../../include/etr/*.h; do
    [ -f "$prefix/include/etr/$(basename "$h")" ] || fail "header not installed: $(basename "$h")"
  done
  # Nothing may point back into the build or source tree (the install must be relocatable).
  # (The prefix itself lies inside the build tree, so its own path is taken out first.)
  for f in "$prefix/$libdir"/cmake/etr/*.cmake "$prefix/$libdir"/pkgconfig/etr*.pc; do
    if sed "s#$prefix##g" "$f" | grep -q -F -e "$build"; then
      fail "$f refers to the build tree $build"
    fi
  done
  say "installed into $prefix"
}

step_python() {
  [ -n "$python" ] && [ -n "$pydir" ] || fail "python= and pydir= are required"
  ls "$prefix/$pydir"/etr/_etr*.so >/dev/null 2>&1 || fail "not installed: $pydir/etr/_etr*.so"
  [ -f "$prefix/$pydir/etr/__init__.py" ] || fail "not installed: $pydir/etr/__init__.py"
  out=$work/py.json
  rm -f "$out"
  # from a clean environment: only the prefix's package directory on the path
  env -i PATH=/usr/bin:/bin PYTHONPATH="$prefix/$pydir" "$python" -c "
import etr, json, sys
assert etr.__file__.startswith('$prefix'), etr.__file__
with etr.trace(sys.argv[1]):
    with etr.record_function('installed_op', inputs=[1, 'x']):
        pass
names = [n['name'] for n in json.load(open(sys.argv[1]))['nodes']]
assert 'installed_op' in names, names
" "$out" || fail "import etr from $prefix/$pydir failed"
  say "python: import etr from $prefix/$pydir records"
  # etr.torch, when it was built (libtorch found) and PyTorch is there to run it
  if ls "$prefix/$pydir"/etr/_torch*.so >/dev/null 2>&1 &&
    env -i PATH=/usr/bin:/bin "$python" -c "import torch" >/dev/null 2>&1; then
    env -i PATH=/usr/bin:/bin PYTHONPATH="$prefix/$pydir" "$python" -c "
import etr.torch, json, sys, torch
with etr.torch.trace(sys.argv[1]):
    torch.ones(2, 2).add(1)
names = [n['name'] for n in json.load(open(sys.argv[1]))['nodes']]
assert 'aten::add' in names, names
" "$work/torch.json" || fail "import etr.torch from $prefix/$pydir failed"
    say "python: etr.torch from $prefix/$pydir records aten ops"
  fi
}

cmake_consumer() {
  kind=$1 static=$2
  bdir=$work/cmake-$kind
  rm -rf "$bdir"
  say "configure consumer-cmake ($kind) against $prefix"
  cmake -S "$src/consumer-cmake" -B "$bdir" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCONSUMER_STATIC="$static" \
    -DCMAKE_C_FLAGS="$san_flags" -DCMAKE_CXX_FLAGS="$san_flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$san_flags" || fail "configure of consumer-cmake ($kind) failed"
  cmake --build "$bdir" || fail "build of consumer-cmake ($kind) failed"
}

step_cmake_shared() {
  cmake_consumer shared OFF
  for app in consumer_c consumer_cxx; do
    check_uses_prefix "$work/cmake-shared/$app"
    run_app "$work/cmake-shared/$app" "cmake-shared-$app"
  done
}

step_cmake_static() {
  cmake_consumer static ON
  for app in consumer_c consumer_cxx; do
    bin=$work/cmake-static/$app
    if readelf -d "$bin" | grep -q 'NEEDED.*libetr'; then
      fail "$app links etr::etr_static but still needs libetr.so"
    fi
    run_app "$bin" "cmake-static-$app"
  done
}

step_pkgconfig() {
  PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
  export PKG_CONFIG_PATH
  flags=$(pkg-config --cflags --libs etr) || fail "pkg-config --cflags --libs etr failed"
  say "pkg-config --cflags --libs etr: $flags"
  # The .pc file must follow the prefix the package was installed to (cmake --install
  # --prefix), like the CMake package files do.
  incdir=$(pkg-config --variable=includedir etr)
  case "$incdir" in
  "$prefix"/*) ;;
  *) fail "etr.pc installed in $prefix gives includedir=$incdir: the .pc file is not relocatable (write prefix=\${pcfiledir}/../.. in it)" ;;
  esac
  version=$(pkg-config --modversion etr) || fail "pkg-config --modversion etr failed"
  [ -n "$version" ] || fail "etr.pc has no version"
  bdir=$work/pkgconfig
  rm -rf "$bdir"
  mkdir -p "$bdir" || fail "cannot create $bdir"
  # shellcheck disable=SC2086
  "$cc" -std=c11 -Wall -Wextra -Werror $san_flags "$src/consumer-cmake/app.c" \
    -o "$bdir/consumer_c" $flags || fail "cc with pkg-config flags failed"
  # shellcheck disable=SC2086
  "$cxx" -std=c++11 -Wall -Wextra -Werror $san_flags "$src/consumer-cmake/app.cpp" \
    -o "$bdir/consumer_cxx" $flags || fail "c++ with pkg-config flags failed"
  for app in consumer_c consumer_cxx; do
    check_uses_prefix "$bdir/$app"
    run_app "$bdir/$app" "pkgconfig-$app"
  done
}

step_torch() {
  [ -e "$prefix/$libdir/libetr_torch.so" ] || fail "libetr_torch is not installed in $prefix"
  bdir=$work/cmake-torch
  rm -rf "$bdir"
  say "configure consumer-torch against $prefix"
  cmake -S "$src/consumer-torch" -B "$bdir" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_CXX_COMPILER="$cxx" || fail "configure of consumer-torch failed"
  cmake --build "$bdir" || fail "build of consumer-torch failed"
  check_uses_prefix "$bdir/consumer_torch"
  run_app "$bdir/consumer_torch" "cmake-torch"
  PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
  export PKG_CONFIG_PATH
  flags=$(pkg-config --cflags --libs etr-torch) || fail "pkg-config --cflags --libs etr-torch failed"
  say "pkg-config --cflags --libs etr-torch: $flags"
  # shellcheck disable=SC2086
  "$cxx" -std=c++17 -Wall -Wextra -Werror "$src/consumer-torch/app.cpp" \
    -o "$work/pkgconfig-torch" $flags || fail "c++ with pkg-config etr-torch flags failed"
  check_uses_prefix "$work/pkgconfig-torch"
  run_app "$work/pkgconfig-torch" "pkgconfig-torch"
}

case "$step" in
python) step_python ;;
torch) step_torch ;;
install) step_install ;;
cmake-shared) step_cmake_shared ;;
cmake-static) step_cmake_static ;;
pkgconfig) step_pkgconfig ;;
*) fail "unknown step '$step' (install, cmake-shared, cmake-static, pkgconfig)" ;;
esac
say "ok: $step"
