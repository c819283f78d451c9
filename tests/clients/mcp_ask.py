"""Drives Akritas' MCP server (`/mcp`) with the Python `mcp` SDK over streamable HTTP.

Usage: mcp_ask.py URL KEY_A KEY_B KEY_C INCIDENT_ID EXPECTED_ANSWER SEARCH_MARKER

KEY_A (chat scope, namespace team-a) asks a question and reads; KEY_B (namespace
team-b) must not see team-a's Run or Incident; KEY_C (read scope, team-a) reads but
cannot ask. Prints one JSON line
{"run_id": ...} and exits 0 when every check holds; exits 1 naming the first
mismatch otherwise.
"""

import asyncio
import json
import sys

from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TOOLS = {"ask", "search_runbooks", "list_incidents", "get_incident", "get_run"}


def fail(message):
    print(f"MISMATCH: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def text_of(result):
    return " ".join(getattr(block, "text", "") for block in result.content)


async def session_for(url, key, body, statuses=None):
    headers = {"Authorization": f"Bearer {key}"}
    http = create_mcp_http_client(headers=headers)
    if statuses is not None:

        async def record(response):
            statuses.append(response.status_code)

        http.event_hooks["response"].append(record)
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


async def tenant_a(session, incident_id, expected_answer, marker):
    listed = await session.list_tools()
    names = {tool.name for tool in listed.tools}
    check(names == TOOLS, f"tools listed: {sorted(names)}")
    for tool in listed.tools:
        check(tool.annotations is not None and tool.annotations.read_only_hint is True, f"{tool.name} not readOnly")
        check(tool.input_schema.get("additionalProperties") is False, f"{tool.name} schema is not strict")

    asked = await session.call_tool("ask", {"question": "Why is checkout slow?", "context": {"service": "checkout"}})
    check(not asked.is_error, f"ask failed: {text_of(asked)}")
    out = asked.structured_content or {}
    check(out.get("answer") == expected_answer, f"ask answer: {out}")
    run_id = out.get("run_id") or ""
    check(run_id.startswith("run_"), f"ask run_id: {out}")
    check(isinstance(out.get("tools"), list) and "usage" in out, f"ask output shape: {out}")
    check(json.loads(text_of(asked)) == out, "ask text content is not the structured content")

    missing = await session.call_tool("ask", {})
    check(missing.is_error and "question" in text_of(missing), f"ask without question: {text_of(missing)}")
    unknown = await session.call_tool("ask", {"question": "q", "sql": "drop"})
    check(unknown.is_error and "unknown argument `sql`" in text_of(unknown), f"unknown arg: {text_of(unknown)}")
    big = await session.call_tool("ask", {"question": "x" * (16 * 1024 + 1)})
    check(big.is_error and "16384" in text_of(big), f"oversized question: {text_of(big)}")

    found = await session.call_tool("search_runbooks", {"query": "checkout latency", "top_k": 3})
    check(not found.is_error and marker in json.dumps(found.structured_content), f"search: {text_of(found)}")
    bad_k = await session.call_tool("search_runbooks", {"query": "x", "top_k": "three"})
    check(bad_k.is_error and "top_k" in text_of(bad_k), f"top_k as text: {text_of(bad_k)}")
    big_k = await session.call_tool("search_runbooks", {"query": "x", "top_k": 21})
    check(big_k.is_error and "from 1 to 20" in text_of(big_k), f"top_k 21: {text_of(big_k)}")

    incidents = await session.call_tool("list_incidents", {})
    ids = [i["id"] for i in (incidents.structured_content or {}).get("incidents", [])]
    check(not incidents.is_error and incident_id in ids, f"list_incidents: {text_of(incidents)}")
    resolved = await session.call_tool("list_incidents", {"status": "resolved", "limit": 5})
    check(resolved.structured_content == {"incidents": []}, f"resolved filter: {text_of(resolved)}")
    zero = await session.call_tool("list_incidents", {"limit": 0})
    check(zero.is_error and "from 1 to 1000" in text_of(zero), f"limit 0: {text_of(zero)}")
    bad_status = await session.call_tool("list_incidents", {"status": "open"})
    check(bad_status.is_error, f"unknown status accepted: {text_of(bad_status)}")

    incident = await session.call_tool("get_incident", {"id": incident_id})
    check(not incident.is_error, f"get_incident: {text_of(incident)}")
    check(incident.structured_content["incident"]["id"] == incident_id, "get_incident returned another incident")

    run = await session.call_tool("get_run", {"id": run_id})
    check(not run.is_error, f"get_run: {text_of(run)}")
    record = run.structured_content["run"]
    check((record["source"], record["namespace"]) == ("mcp", "team-a"), f"get_run record: {record}")
    long_id = await session.call_tool("get_run", {"id": "r" * 129})
    check(long_id.is_error and "1..128 bytes" in text_of(long_id), f"129-byte id: {text_of(long_id)}")
    nothing = await session.call_tool("get_run", {"id": "run_" + "0" * 32})
    check(nothing.is_error and "not found" in text_of(nothing), f"unknown Run: {text_of(nothing)}")
    return run_id


async def tenant_b(session, run_id, incident_id):
    run = await session.call_tool("get_run", {"id": run_id})
    check(run.is_error and "not found" in text_of(run), f"team-b read team-a's Run: {text_of(run)}")
    incident = await session.call_tool("get_incident", {"id": incident_id})
    check(incident.is_error and "not found" in text_of(incident), f"team-b read team-a's Incident: {text_of(incident)}")
    incidents = await session.call_tool("list_incidents", {})
    check(incidents.structured_content == {"incidents": []}, f"team-b lists: {text_of(incidents)}")


async def read_only(session, incident_id):
    asked = await session.call_tool("ask", {"question": "Why is checkout slow?"})
    check(asked.is_error and "chat scope" in text_of(asked), f"a read-only key asked: {text_of(asked)}")
    incident = await session.call_tool("get_incident", {"id": incident_id})
    check(not incident.is_error, f"a read key of team-a cannot read its Incident: {text_of(incident)}")


async def wrong_key(url):
    statuses = []
    try:
        await session_for(url, "not-a-configured-key-0123", lambda session: session.list_tools(), statuses)
    except Exception:  # the SDK raises (an ExceptionGroup around) an MCPError for the HTTP error
        return statuses
    fail("a wrong API key was let in")


async def main():
    url, key_a, key_b, key_c, incident_id, expected_answer, marker = sys.argv[1:8]
    statuses = await wrong_key(url)
    check(statuses == [401], f"a wrong key got HTTP {statuses}, not just 401")
    run_id = await session_for(url, key_a, lambda s: tenant_a(s, incident_id, expected_answer, marker))
    await session_for(url, key_b, lambda s: tenant_b(s, run_id, incident_id))
    await session_for(url, key_c, lambda s: read_only(s, incident_id))
    print(json.dumps({"run_id": run_id}))


asyncio.run(main())
