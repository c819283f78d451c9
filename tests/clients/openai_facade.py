"""The official `openai` package against Akritas's facade (run by tests/facade_openai.rs).

Usage: openai_facade.py BASE_URL API_KEY ANSWER
Exits non-zero with a message on the first mismatch; prints the measured stream timings.
"""

import json
import sys
import time

import openai

BASE_URL, API_KEY, ANSWER = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = "akritas"


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", file=sys.stderr)
        sys.exit(1)


def expect_error(kind, call, status, code=None, param=None):
    try:
        call()
    except kind as error:
        check(error.status_code == status, f"{kind.__name__}: status {error.status_code} != {status}")
        body = error.body if isinstance(error.body, dict) else {}
        check(isinstance(body.get("message"), str) and body["message"], f"{kind.__name__}: message in {body}")
        if code is not None:
            check(body.get("code") == code, f"{kind.__name__}: code {body.get('code')!r} != {code!r}")
        if param is not None:
            check(body.get("param") == param, f"{kind.__name__}: param {body.get('param')!r} != {param!r}")
        return body
    except Exception as error:  # noqa: BLE001 - any other exception is a mismatch
        check(False, f"expected {kind.__name__}, got {type(error).__name__}: {error}")
    check(False, f"expected {kind.__name__}, the call succeeded")


client = openai.OpenAI(base_url=f"{BASE_URL}/v1", api_key=API_KEY, max_retries=0, timeout=30)
question = [{"role": "user", "content": "Why is db-7 slow?"}]

# Models.
ids = [model.id for model in client.models.list()]
check(ids == [MODEL], f"model list {ids}")
check(client.models.retrieve(MODEL).owned_by == "akritas", "retrieve the model")

# Non-streamed completion, with the Run id header.
raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=question)
run_id = raw.headers.get("x-akritas-run-id", "")
check(run_id.startswith("run_"), f"run id header {run_id!r}")
completion = raw.parse()
check(completion.id == f"chatcmpl-{run_id}", f"completion id {completion.id}")
check(completion.choices[0].message.content == ANSWER, f"answer {completion.choices[0].message.content!r}")
check(completion.choices[0].finish_reason == "stop", "finish_reason")
usage = completion.usage
check(usage.prompt_tokens > 0 and usage.completion_tokens > 0, f"usage {usage}")
check(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, f"usage total {usage}")
print(f"non-stream run {run_id} usage {usage.prompt_tokens}+{usage.completion_tokens}")

# Streamed completion: progress lines, then the answer, then usage.
started = time.monotonic()
raw = client.chat.completions.with_raw_response.create(
    model=MODEL, messages=question, stream=True, stream_options={"include_usage": True}
)
stream_run = raw.headers.get("x-akritas-run-id", "")
check(stream_run.startswith("run_") and stream_run != run_id, f"stream run id {stream_run!r}")
first_chunk = None
pieces, finish, stream_usage, roles = [], None, None, []
for chunk in raw.parse():
    if first_chunk is None:
        first_chunk = time.monotonic() - started
    for choice in chunk.choices:
        if choice.delta.role:
            roles.append(choice.delta.role)
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
    if chunk.usage:
        stream_usage = chunk.usage
total = time.monotonic() - started
text = "".join(pieces)
check(roles == ["assistant"], f"role chunks {roles}")
check(finish == "stop", f"stream finish_reason {finish}")
check(stream_usage is not None and stream_usage.prompt_tokens > 0, f"usage chunk {stream_usage}")
expected_head = "> plan: 1 check (postgres.activity)\n> ✓ postgres.activity · ok · "
check(text.startswith(expected_head), f"progress lines first: {text!r}")
check(text.endswith(f" ms\n\n{ANSWER}"), f"blank line then the answer: {text!r}")
check(len(pieces) > 3, f"the answer arrived in pieces: {pieces}")
# The scripted model waits before its answer: the first chunk must come well before the end.
check(first_chunk < total - 0.3, f"first chunk at {first_chunk:.3f}s, end at {total:.3f}s")
print(f"stream time to first chunk {first_chunk * 1000:.0f} ms, total {total * 1000:.0f} ms")

# Progress lines turned off.
stream = client.chat.completions.create(
    model=MODEL, messages=question, stream=True, extra_body={"akritas_progress": False}
)
quiet = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
check(quiet == ANSWER, f"no progress lines: {quiet!r}")

# Text parts, and history carrying an earlier streamed answer.
parts = [{"type": "text", "text": "why is"}, {"type": "text", "text": "db-7 slow?"}]
answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": parts}])
check(answer.choices[0].message.content == ANSWER, "text parts")
history = [question[0], {"role": "assistant", "content": text}, {"role": "user", "content": "and now?"}]
check(client.chat.completions.create(model=MODEL, messages=history).choices[0].message.content == ANSWER, "history")

# Errors.
# An unknown model is answered as OpenAI answers it: 404 invalid_request_error, NotFoundError.
body = expect_error(
    openai.NotFoundError,
    lambda: client.chat.completions.create(model="gpt-4o", messages=question),
    404,
    "model_not_found",
    "model",
)
check(body.get("type") == "invalid_request_error", f"unknown model type {body.get('type')!r}")
check(body["message"].startswith("The model `gpt-4o` does not exist"), f"unknown model message {body['message']!r}")
body = expect_error(openai.NotFoundError, lambda: client.models.retrieve("gpt-4o"), 404, "model_not_found", "model")
check(body.get("type") == "invalid_request_error", f"unknown model (retrieve) type {body.get('type')!r}")
image = [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]
expect_error(
    openai.BadRequestError,
    lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": image}]),
    400,
    "unsupported_content",
    "messages[0].content",
)
two_users = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
body = expect_error(
    openai.BadRequestError,
    lambda: client.chat.completions.create(model=MODEL, messages=two_users),
    400,
    "invalid_request",
    "messages",
)
check("alternate" in body["message"], f"alternation message {body['message']!r}")
expect_error(
    openai.BadRequestError,
    lambda: client.chat.completions.create(model=MODEL, messages=question, max_tokens=1_000_000),
    400,
    "invalid_value",
    "max_tokens",
)
wrong = openai.OpenAI(base_url=f"{BASE_URL}/v1", api_key="wrong-key-0123456789", max_retries=0)
expect_error(openai.AuthenticationError, lambda: wrong.models.list(), 401, "invalid_api_key")
expect_error(
    openai.AuthenticationError, lambda: wrong.chat.completions.create(model=MODEL, messages=question), 401
)

print(json.dumps({"ok": True, "runs": [run_id, stream_run]}))
