#!/usr/bin/env bash
# The official MCP client SDKs for the test suite (issue 33): the Python SDK (`mcp` on
# PyPI) in a venv and the TypeScript SDK (@modelcontextprotocol/sdk on npm), cached
# under ~/.cache/nlproxy/mcpclients.
#
# Usage: eval "$(scripts/mcpclients.sh)"   # prints export lines on stdout, all else on stderr
# On any failure it prints what it could on stdout, explains on stderr and exits 0: the
# tests of a missing client skip and say so. NLPROXY_MCPCLIENTS=off skips it outright.
set -uo pipefail
cd "$(dirname "$0")/.."

log() { echo "mcpclients: $*" >&2; }
[ "${NLPROXY_MCPCLIENTS:-on}" = off ] && { log "skipped: NLPROXY_MCPCLIENTS=off"; exit 0; }

# Bounded to the major versions the tests speak; the cache keeps what was installed
# (remove it, or set these, to test another release).
PY_MCP=${NLPROXY_MCP_PY_VERSION:-mcp>=1.12,<3}
TS_MCP=${NLPROXY_MCP_TS_VERSION:-@modelcontextprotocol/sdk@^1.17}
CACHE=${NLPROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nlproxy}/mcpclients
mkdir -p "$CACHE" || { log "cannot create $CACHE"; exit 0; }
# One install at a time per cache (two test runs on one machine).
exec 9>"$CACHE/.setup.lock"
flock 9 || { log "cannot lock $CACHE/.setup.lock"; exit 0; }

# Python: a venv of its own.
VENV=$CACHE/venv
if command -v python3 >/dev/null; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2 || log "python3 -m venv failed (python3-venv missing?)"
  if [ -x "$VENV/bin/python" ]; then
    "$VENV/bin/python" -c 'import mcp.client.streamable_http, mcp.client.stdio' 2>/dev/null ||
      "$VENV/bin/pip" install -q --disable-pip-version-check "$PY_MCP" >&2 || log "pip install mcp failed (offline or PyPI down)"
    if "$VENV/bin/python" -c 'import mcp.client.streamable_http, mcp.client.stdio' 2>/dev/null; then
      echo "export NLPROXY_MCP_PYTHON=$VENV/bin/python"
    fi
  fi
else
  log "no python3: the Python SDK tests will skip"
fi

# TypeScript: node_modules of its own.
NODE_DIR=$CACHE/node
if command -v node >/dev/null && command -v npm >/dev/null; then
  mkdir -p "$NODE_DIR"
  if [ ! -f "$NODE_DIR/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
    [ -f "$NODE_DIR/package.json" ] || echo '{"name":"nlproxy-mcp-clients","private":true}' >"$NODE_DIR/package.json"
    (cd "$NODE_DIR" && npm install --no-audit --no-fund --silent "$TS_MCP") >&2 || log "npm install $TS_MCP failed (offline or npm down)"
  fi
  if [ -f "$NODE_DIR/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
    echo "export NLPROXY_MCP_NODE_MODULES=$NODE_DIR/node_modules"
  fi
else
  log "no node/npm: the TypeScript SDK tests will skip"
fi
