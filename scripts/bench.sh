#!/usr/bin/env bash
# scripts/bench.sh — install what the benchmarks need, build them in Release, run etr-bench.
#
#   ./scripts/bench.sh [etr-bench options]     e.g. --reps 21, --only enabled,lttng
#
# Besides the build packages of scripts/lib.sh it installs the peer measured in the same run:
# LTTng-UST (lttng-tools, liblttng-ust-dev). etr-bench-lttng starts lttng-sessiond for its
# session when none runs and stops it afterwards. Figures: docs/BENCHMARKS.md.
# Build directory: build/bench (Release).
set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ETR_ROOT" || exit 1

case "${1:-}" in
-h | --help)
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
  exit 0
  ;;
esac

ETR_PACKAGES+=(lttng-tools liblttng-ust-dev)
etr_ensure_packages || exit 1
ETR_BUILD_TARGETS="etr-bench" etr_build bench -DCMAKE_BUILD_TYPE=Release || etr_die "build failed"
exe=$(etr_find_exe build/bench etr-bench)
[ -n "$exe" ] || etr_die "etr-bench was not built"
etr_say "load average: $(cut -d' ' -f1-3 /proc/loadavg) (figures are noisier above ~0.5 per core)"
exec "$exe" "$@"
