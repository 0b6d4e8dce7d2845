#!/usr/bin/env bash
# scripts/format.sh — clang-format over every C/C++ source of the repository (.clang-format).
#
#   ./scripts/format.sh          reformat the tracked sources in place
#   ./scripts/format.sh --check  change nothing; list the files that differ, exit 1 if any
#
# The fuzz corpus is data, not code, and is left alone.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
mode=fix
case "${1:-}" in
--check) mode=check ;;
"") ;;
-h | --help)
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
  exit 0
  ;;
*)
  echo "format.sh: unknown argument: $1 (try --help)" >&2
  exit 2
  ;;
esac
cf=$(command -v clang-format || command -v clang-format-14) || {
  echo "format.sh: clang-format is not installed (apt-get install clang-format)" >&2
  exit 2
}
mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.cc' '*.cpp' '*.hpp' | grep -v '^tests/fuzz/corpus/')
if [ "$mode" = fix ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$cf" "$f" | cmp -s - "$f"; then
    echo "not formatted: $f (run ./scripts/format.sh)"
    bad=1
  fi
done
[ "$bad" -eq 0 ] && echo "format: ${#files[@]} files match .clang-format"
exit "$bad"
