# shellcheck shell=bash
# scripts/lib.sh — shared by scripts/demo.sh and scripts/test.sh (source it from bash).
#
# One place for: the list of Debian packages the build needs and how they get installed,
# logging, and configure+build of one build directory under build/.
#
# Environment knobs:
#   ETR_JOBS=N          parallel build/test jobs (default 2: CI machines have 2 cores)
#   ETR_SKIP_INSTALL=1  never call apt-get (report what is missing and go on)

ETR_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ETR_JOBS=${ETR_JOBS:-2}

# Everything the build and the tests need: the compilers, cmocka and jansson for the tests,
# libdw (symbolization) and libunwind (the capture's fallback, loaded at run time), yajl and
# zlib for the etr command's reader, ISA-L (libisal-dev) for `.json.gz` output, python3-dev
# for the CPython example, GNU time for the reader benchmark's peak memory, libclang-rt-14-dev
# for clang's libFuzzer (tests/fuzz), clang-format for the format check of scripts/test.sh,
# protobuf-c for `etr chakra`, libtorch-dev and python3-torch for the PyTorch integration (docs/TORCH.md) and its test.
ETR_PACKAGES=(
  build-essential clang clang-format libclang-rt-14-dev cmake pkg-config
  libcmocka-dev libjansson-dev zlib1g-dev libisal-dev libyajl-dev libprotobuf-c-dev
  protobuf-c-compiler
  python3 python3-dev libunwind-dev libdw-dev
  valgrind git time
  libtorch-dev python3-torch libzstd-dev zstd
)

etr_say() { printf '==> %s\n' "$*"; }
etr_warn() { printf 'warning: %s\n' "$*" >&2; }
etr_die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Seconds as "1m05s" / "42s".
etr_fmt_secs() {
  local s=$1
  if [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

# Run a command as root: directly when we are root, else through sudo when it exists
# (non-interactive sudo when there is no terminal, e.g. in CI).
etr_as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    if [ -t 0 ] && [ -z "${CI:-}" ]; then sudo "$@"; else sudo -n "$@"; fi
  else
    return 127
  fi
}

etr_pkg_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

_etr_apt_updated=0

# Install the packages of ETR_PACKAGES that are missing: apt-get update once, then
# apt-get install -y --no-install-recommends of only what is missing.
etr_ensure_packages() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    etr_warn "not a Debian-like system (no dpkg-query): make sure these are installed:" \
      "${ETR_PACKAGES[*]}"
    return 0
  fi
  local p missing=()
  for p in "${ETR_PACKAGES[@]}"; do
    etr_pkg_installed "$p" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    etr_say "packages: all ${#ETR_PACKAGES[@]} needed packages are installed"
    return 0
  fi
  if [ -n "${ETR_SKIP_INSTALL:-}" ]; then
    etr_warn "ETR_SKIP_INSTALL is set; missing packages: ${missing[*]}"
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 ||
    etr_die "missing packages (${missing[*]}) and no apt-get to install them"
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    etr_die "missing packages: ${missing[*]}; run as root or install sudo"
  fi
  etr_say "packages: installing ${missing[*]}"
  if [ "$_etr_apt_updated" -eq 0 ]; then
    etr_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
      etr_die "apt-get update failed"
    _etr_apt_updated=1
  fi
  etr_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "${missing[@]}" ||
    etr_die "apt-get install failed for: ${missing[*]}"
  for p in "${missing[@]}"; do
    etr_pkg_installed "$p" || etr_die "package $p is still not installed"
  done
  etr_say "packages: installed ${missing[*]}"
}

# etr_build NAME [cmake args...]: configure build/NAME with the given cache arguments and
# build everything (or only the targets in ETR_BUILD_TARGETS, space separated).
# The viewer test's importer (tests/cli/run_viewer_test.sh): Chrome DevTools' trace engine
# from the npm registry, into build/npm, when npm is there and it is not installed yet.
# Never fatal: without it the test is skipped.
ETR_VIEWER_NPM="@paulirish/trace_engine@0.0.65"
etr_npm_viewer() {
  local dir="$ETR_ROOT/build/npm"
  [ -f "$dir/node_modules/@paulirish/trace_engine/analyze-trace.mjs" ] && return 0
  if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    etr_say "no node/npm: the viewer test (cli.viewer_devtools) will be skipped"
    return 0
  fi
  mkdir -p "$dir" || return 0
  etr_say "npm install $ETR_VIEWER_NPM into build/npm (for cli.viewer_devtools)"
  timeout 300 npm install --prefix "$dir" --no-audit --no-fund --no-save "$ETR_VIEWER_NPM" \
    >"$dir/install.log" 2>&1 ||
    etr_warn "npm install failed (see build/npm/install.log): cli.viewer_devtools will be skipped"
  return 0
}

etr_build() {
  local name=$1
  shift
  local dir="$ETR_ROOT/build/$name"
  cmake -S "$ETR_ROOT" -B "$dir" "$@" || return 1
  if [ -n "${ETR_BUILD_TARGETS:-}" ]; then
    # shellcheck disable=SC2086
    cmake --build "$dir" -j "$ETR_JOBS" --target $ETR_BUILD_TARGETS || return 1
  else
    cmake --build "$dir" -j "$ETR_JOBS" || return 1
  fi
}

# Path of an executable target's output in a build dir (first match), or nothing.
etr_find_exe() {
  local dir=$1 name=$2
  find "$dir" -path "$dir/CMakeFiles" -prune -o -type f -name "$name" -perm -u+x -print \
    2>/dev/null | head -n 1
}
