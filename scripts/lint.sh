#!/usr/bin/env bash
# Style checks: clang-format (must be clean: exit 1 otherwise) and clang-tidy-16 with the
# checked-in .clang-tidy over the project's own sources (advisory: printed, not fatal).
# Needs a configured build/release (compile_commands.json).   scripts/lint.sh [--no-tidy]
set -uo pipefail
cd "$(dirname "$0")/.."
rc=0
mapfile -t files < <(git ls-files '*.cpp' '*.h')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "lint: clang-format would change: ${bad[*]}"; rc=1
else
  echo "lint: clang-format clean (${#files[@]} files)"
fi
if [[ ${1:-} != --no-tidy ]]; then
  [[ -f build/release/compile_commands.json ]] || {
    echo "lint: configure build/release first (cmake -S . -B build/release -G Ninja)"; exit 1; }
  mapfile -t srcs < <(git ls-files '*.cpp' | grep -v '^tests/fuzz/')
  # clang-16 needs the same nudge as the Fuzz build to see libstdc++ 12's std::expected.
  clang-tidy-16 -p build/release --quiet \
    --extra-arg=-std=c++2b --extra-arg=-D__cpp_concepts=202002L \
    --extra-arg=-Wno-macro-redefined --extra-arg=-Wno-unknown-warning-option \
    "${srcs[@]}" 2>/dev/null | grep -E 'warning:|error:' | grep -v '/build/' | sort -u
  echo "lint: clang-tidy findings above are advisory"
fi
exit $rc
