#!/usr/bin/env bash
# One fuzz target for `make fuzz`: go test -fuzz for a duration.
#
# Go 1.26's fuzz coordinator can fail a run that found nothing with a bare
# "context deadline exceeded" when a loaded machine's worker misses the
# -fuzztime deadline (go.dev/issue/75804, fixed in Go 1.27). Such a run
# writes no failing input and its target's only failure line is that one;
# it is run once more. Any other failure, or a second one, fails.
#
# Usage: scripts/fuzz.sh FUZZTIME PKG TARGET [go test flags...]
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 FUZZTIME PKG TARGET [go test flags...]" >&2; exit 2; }
time=$1 pkg=$2 target=$3
shift 3
GO=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for try in 1 2; do
  "$GO" test -run '^$' -fuzz "^$target\$" -fuzztime "$time" "$@" "$pkg" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && exit 0
  if [ "$try" = 1 ] && ! grep -q 'Failing input written' "$out" &&
    [ "$(grep -c -- '^--- FAIL' "$out")" = 1 ] &&
    [ "$(grep -A1 -- "^--- FAIL: $target " "$out" | tail -n 1 | tr -d ' \t')" = contextdeadlineexceeded ]; then
    echo "fuzz: $target ended on Go 1.26's fuzzing deadline race (go.dev/issue/75804) with no failing input; running it once more" >&2
    continue
  fi
  exit "$rc"
done
