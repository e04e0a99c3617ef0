#!/usr/bin/env bash
# Runs every benchmark program present under bench/. Arguments are passed to
# proxybench (e.g. -T 10 -repeat 3 -json bench/results/proxy.json).
# Results also go to bench/results/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
stamp=$(date +%Y%m%d-%H%M%S)

status=0
echo "== proxybench"
go run ./bench/proxybench -json "bench/results/proxy-$stamp.json" "$@" | tee "bench/results/proxy-$stamp.txt" || status=1

for b in catalogbench enginebench recall askallrecall optimizebench; do
	if [ -d "bench/$b" ] && ls "bench/$b"/*.go >/dev/null 2>&1; then
		echo "== $b"
		go run "./bench/$b" | tee "bench/results/$b-$stamp.txt" || status=1
	fi
done
exit $status
