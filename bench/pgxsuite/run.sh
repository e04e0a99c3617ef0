#!/usr/bin/env bash
# Runs pgx's own test suite through nlproxy (TCP, TLS ended at the proxy, Unix
# socket) against a throwaway Postgres; see main.go. Flags go to the program
# (-direct for the baseline without the proxy, -out DIR), arguments after --
# to go test (e.g. -- -run TestConnect ./pgconn).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go run ./bench/pgxsuite "$@"
