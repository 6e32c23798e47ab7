"""OpenAIPolicy against a real local OpenAI-compatible server (`transformers serve` on the tiny
random model), both wire formats; plus the reply parsing on hand-written replies for the cases
a random model does not produce (tool calls, malformed arguments, reasoning)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest
from serve_util import free_port, transformers_server  # tests/ is on sys.path under pytest
from transformers import AutoTokenizer

import rl_compaction.harness.env  # noqa: F401  (registers the envs)
from rl_compaction.core.render import chat_messages, chat_tools
from rl_compaction.core.state import validate_state
from rl_compaction.harness.tasks import SUBMIT_TOOL, Difficulty
from rl_compaction.models.registry import build_tiny_model
from rl_compaction.policies.openai_http import (
    HTTPPolicyError,
    OpenAIPolicy,
    chat_request_messages,
    items_from_chat_message,
    items_from_response_output,
)
from rl_compaction.protocol.evolve import EVOLVE_TOOL

pytest.importorskip("fastapi", reason="transformers serve needs transformers[serving] (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="transformers serve needs transformers[serving] (fastapi, uvicorn)")

APIS = ("chat", "responses")
#: Short, seeded sampling; the server rejects fields it does not know, so this checks the request shape too.
SAMPLING = {"temperature": 1.0, "top_p": 0.9, "max_output_tokens": 8, "extra_body": {"seed": 0}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("openai_http")
    model = build_tiny_model(root / "tiny")
    with transformers_server(model, root / "serve.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def tokenizer(server):
    return AutoTokenizer.from_pretrained(server.model)


def _obs(state_text: str, extra_items: list | None = None) -> dict:
    state = [{"type": "message", "role": "user", "content": state_text}, *(extra_items or [])]
    return {"instructions": "Answer briefly.", "tools": [EVOLVE_TOOL, SUBMIT_TOOL], "state": state}


def _local_prompt_tokens(tokenizer, obs: dict) -> int:
    """The prompt length the server should see for the chat API: our rendering, its template."""
    ids = tokenizer.apply_chat_template(
        chat_messages(obs["instructions"], obs["state"]),
        tools=chat_tools(obs["tools"]),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    return len(ids)


def _assert_output_items(items: list) -> None:
    """Items are Responses output items the env takes: assistant messages with string content and
    function calls; answered, they form a valid State."""
    answered = []
    for item in items:
        if item["type"] == "message":
            assert set(item) == {"type", "role", "content"} and item["role"] == "assistant"
            assert isinstance(item["content"], str)
            answered.append(item)
        else:
            assert item["type"] == "function_call" and set(item) == {"type", "call_id", "name", "arguments"}
            assert isinstance(json.loads(item["arguments"]), dict)
            answered += [item, {"type": "function_call_output", "call_id": item["call_id"], "output": "ok"}]
    validate_state(answered)


# --------------------------------------------------------------------------- real server


@pytest.mark.slow
@pytest.mark.parametrize("api", APIS)
def test_turn_from_real_server_steps_the_env(server, api):
    env = gym.make("rl_compaction/probe-v0", split="test", difficulty=Difficulty(scale=0.25))
    obs, _ = env.reset(seed=0)
    policy = OpenAIPolicy(server.model, base_url=server.base_url, api=api, logprobs=True, **SAMPLING)
    try:
        [turn] = policy.act([obs])
    finally:
        policy.close()
    _assert_output_items(turn.items)
    # the random model writes text (mostly newlines): kept as a message since no call stands beside it
    assert turn.text and turn.items == [{"type": "message", "role": "assistant", "content": turn.text}]
    assert turn.prompt_ids is None and turn.completion_ids is None
    # transformers serve does not return logprobs; when a server does, one per message token
    assert turn.logprobs is None
    assert turn.usage["input_tokens"] > 1000  # the probe task's instructions and tools are long
    assert 1 <= turn.usage["output_tokens"] <= 8
    assert turn.usage["cached_tokens"] in (None, 0)
    assert turn.latency_s > 0 and turn.extra["api"] == api and turn.extra["id"]
    events_before = len(env.unwrapped.events)
    env.step(turn.as_action())
    assert not [e for e in env.unwrapped.events[events_before:] if e["event"] == "malformed_action"]


def test_chat_prompt_is_what_the_template_renders_locally(server, tokenizer):
    """The server's prompt count equals our rendering through the model's own template: the
    State, including a tool call (arguments sent as a JSON string) and its output, arrives intact."""
    call = {"type": "function_call", "call_id": "call_7", "name": "submit", "arguments": '{"answer":  "42"}'}
    output = {"type": "function_call_output", "call_id": "call_7", "output": "Answer submitted."}
    obs = _obs("What is six times seven?", [call, output, {"type": "message", "role": "user", "content": "Again."}])
    policy = OpenAIPolicy(server.model, base_url=server.base_url, api="chat", **SAMPLING)
    try:
        [turn] = policy.act([obs])
    finally:
        policy.close()
    assert turn.usage["input_tokens"] == _local_prompt_tokens(tokenizer, obs)


def test_responses_accepts_a_state_with_calls_and_reasoning(server):
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Multiply."}]}
    call = {"type": "function_call", "call_id": "call_7", "name": "submit", "arguments": '{"answer": "42"}'}
    output = {"type": "function_call_output", "call_id": "call_7", "output": [{"type": "input_text", "text": "ok"}]}
    obs = _obs("What is six times seven?", [reasoning, call, output])
    validate_state(obs["state"])
    policy = OpenAIPolicy(server.model, base_url=server.base_url, api="responses", **SAMPLING)
    try:
        [turn] = policy.act([obs])
    finally:
        policy.close()
    _assert_output_items(turn.items)
    assert turn.extra["status"] in ("completed", "incomplete") and turn.usage["input_tokens"] > 0


@pytest.mark.parametrize("api", APIS)
def test_batch_of_three_returns_three_turns_in_order(server, tokenizer, api):
    observations = [_obs("Hi."), _obs("Tell me about the weather today, " * 12), _obs("Count to three. " * 4)]
    policy = OpenAIPolicy(server.model, base_url=server.base_url, api=api, max_concurrency=3, **SAMPLING)
    try:
        turns = policy.act(observations)
    finally:
        policy.close()
    assert len(turns) == 3
    for turn in turns:
        _assert_output_items(turn.items)
    lengths = [t.usage["input_tokens"] for t in turns]
    local = [_local_prompt_tokens(tokenizer, obs) for obs in observations]
    assert lengths[0] < lengths[2] < lengths[1]  # the order of the observations, not of completion
    if api == "chat":
        assert lengths == local


@pytest.mark.parametrize("api", APIS)
def test_unknown_model_is_a_clear_error(server, api):
    policy = OpenAIPolicy("no-such-model", base_url=server.base_url, api=api, max_retries=0)
    try:
        with pytest.raises(HTTPPolicyError) as excinfo:
            policy.act([_obs("Hi.")])
    finally:
        policy.close()
    message = str(excinfo.value)
    assert "HTTP 400" in message and "'no-such-model'" in message and server.base_url in message


# --------------------------------------------------------------------------- failures without that server


@pytest.mark.parametrize("api", APIS)
def test_connection_refused_is_a_clear_error(api):
    base_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    policy = OpenAIPolicy("tiny", base_url=base_url, api=api, max_retries=1, timeout_s=5)
    with pytest.raises(HTTPPolicyError, match="cannot connect") as excinfo:
        policy.act([_obs("Hi.")])
    path = "/chat/completions" if api == "chat" else "/responses"
    assert f"{base_url}{path}" in str(excinfo.value) and "'tiny'" in str(excinfo.value)
    assert "after 1 retries" in str(excinfo.value)


@contextmanager
def _failing_server(status: int | None, hits: list[str]) -> Iterator[str]:
    """A local HTTP server for the failures `transformers serve` cannot be made to produce: every
    POST answers `status`, or with `status` None, hangs for a few seconds. Yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            hits.append(self.path)
            if status is None:
                time.sleep(3)
                return
            body = b'{"error": {"message": "overloaded"}}'
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_server_errors_are_retried_a_bounded_number_of_times():
    """A server that always answers 503 gets the first request plus `max_retries` retries, then a clear error."""
    hits: list[str] = []
    with _failing_server(503, hits) as base_url:
        policy = OpenAIPolicy("tiny", base_url=base_url, max_retries=2)
        with pytest.raises(HTTPPolicyError, match="HTTP 503.*overloaded"):
            policy.act([_obs("Hi.")])
    assert hits == ["/v1/chat/completions"] * 3


def test_client_errors_are_not_retried():
    hits: list[str] = []
    with _failing_server(404, hits) as base_url:
        policy = OpenAIPolicy("tiny", base_url=base_url, api="responses", max_retries=2)
        with pytest.raises(HTTPPolicyError, match="HTTP 404"):
            policy.act([_obs("Hi.")])
    assert hits == ["/v1/responses"]


def test_a_hanging_server_times_out_with_a_clear_error():
    hits: list[str] = []
    with _failing_server(None, hits) as base_url:
        policy = OpenAIPolicy("tiny", base_url=base_url, max_retries=0, timeout_s=0.5)
        with pytest.raises(HTTPPolicyError, match=r"chat request to .*/chat/completions \(model 'tiny'\) timed out"):
            policy.act([_obs("Hi.")])
    assert len(hits) == 1


# --------------------------------------------------------------------------- request and reply conversion


def test_chat_request_messages_follow_the_wire_format():
    state = [
        {"type": "message", "role": "user", "content": "Go."},
        {"type": "function_call", "call_id": "c1", "name": "submit", "arguments": '{"answer":  "x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    messages = chat_request_messages("Sys.", state)
    assert messages == [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "Go."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": '{"answer":  "x"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]


def test_chat_reply_with_calls_and_a_malformed_call():
    message = {
        "role": "assistant",
        "content": "\n",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "evolve", "arguments": '{"code": "return state;"}'},
            },
            {"id": "call_b", "type": "function", "function": {"name": "submit", "arguments": '{"answer": "x"'}},
        ],
    }
    items, malformed = items_from_chat_message(message)
    assert items == [
        {"type": "function_call", "call_id": "call_a", "name": "evolve", "arguments": '{"code": "return state;"}'},
        {
            "type": "message",
            "role": "assistant",
            "content": '{"name": "submit", "arguments": "{\\"answer\\": \\"x\\""}',
        },
    ]
    assert malformed == [{"call_id": "call_b", "name": "submit", "arguments": '{"answer": "x"'}]
    _assert_output_items(items)


def test_chat_reply_text_only_and_missing_call_id():
    assert items_from_chat_message({"role": "assistant", "content": "Hello"}) == (
        [{"type": "message", "role": "assistant", "content": "Hello"}],
        [],
    )
    items, _ = items_from_chat_message(
        {"content": None, "tool_calls": [{"id": "", "function": {"name": "submit", "arguments": "{}"}}]}
    )
    assert items[0]["call_id"].startswith("call_") and len(items) == 1
    # arguments that are JSON but not an object are malformed too
    items, malformed = items_from_chat_message(
        {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[]"}}]}
    )
    assert items[0]["type"] == "message" and malformed[0]["arguments"] == "[]"


def test_responses_output_parsing():
    output = [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "hm"}],
            "status": "completed",
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": "Done.",
                    "annotations": [],
                    "logprobs": [
                        {"token": "Done", "logprob": -0.5, "bytes": [], "top_logprobs": []},
                        {"token": ".", "logprob": -0.25, "bytes": [], "top_logprobs": []},
                    ],
                }
            ],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "submit",
            "arguments": '{"answer": "y"}',
            "status": "completed",
        },
        {"type": "function_call", "call_id": "call_2", "name": "submit", "arguments": "not json"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    parsed = items_from_response_output(output)
    assert parsed["items"] == [
        {"type": "message", "role": "assistant", "content": "Done."},
        {"type": "function_call", "call_id": "call_1", "name": "submit", "arguments": '{"answer": "y"}'},
        {"type": "message", "role": "assistant", "content": '{"name": "submit", "arguments": "not json"}'},
    ]
    assert parsed["text"] == "Done." and parsed["logprobs"] == [-0.5, -0.25]
    assert parsed["malformed"][0]["call_id"] == "call_2" and parsed["skipped"] == ["web_search_call"]
    validate_state(parsed["reasoning"])  # kept as State reasoning items


def test_blank_message_beside_a_call_is_dropped_so_evolve_stays_alone():
    output = [
        {
            "type": "message",
            "id": "m",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c", "name": "evolve", "arguments": '{"code": "return state;"}'},
    ]
    assert [i["type"] for i in items_from_response_output(output)["items"]] == ["function_call"]
    only_text = [{**output[0], "content": [{"type": "output_text", "text": "\n\n", "annotations": []}]}]
    assert items_from_response_output(only_text)["items"] == [
        {"type": "message", "role": "assistant", "content": "\n\n"}
    ]


def test_bad_arguments_are_rejected(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIPolicy("gpt-x")
    with pytest.raises(ValueError, match="api must be one of chat, responses"):
        OpenAIPolicy("m", base_url="http://127.0.0.1:1/v1", api="completions")
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIPolicy("m", base_url="http://127.0.0.1:1/v1", max_concurrency=0)
    with pytest.raises(ValueError, match="base_url must start with http"):
        OpenAIPolicy("m", base_url="127.0.0.1:8000")
    policy = OpenAIPolicy("m", base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="observation 1: missing tools"):
        policy.act([_obs("Hi."), {"instructions": "x", "state": []}])


# --------------------------------------------------------------------------- bad servers


def _chat_reply(message: dict | None = None, usage: object = None) -> dict:
    message = message or {"role": "assistant", "content": "ok"}
    reply = {"id": "c1", "object": "chat.completion", "created": 0, "model": "tiny"}
    reply["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
    return {**reply, "usage": usage} if usage is not None else reply


@contextmanager
def _scripted_server(body: bytes, *, status: int = 200, headers: dict | None = None, trickle_s: float = 0.0):
    """A local server whose every POST answers `body` with `status` and `headers`; with `trickle_s`,
    it sends the body one byte every `trickle_s` seconds. Yields (base URL, paths hit)."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            hits.append(self.path)
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            try:
                if not trickle_s:
                    self.wfile.write(body)
                for i in range(len(body) if trickle_s else 0):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(trickle_s)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client cut the reply off

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/v1", hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_bad_usage_counts_are_recorded_as_none_and_the_turn_is_kept():
    usage = {"prompt_tokens": 12, "completion_tokens": "x", "prompt_tokens_details": {"cached_tokens": -1}}
    with _scripted_server(json.dumps(_chat_reply(usage=usage)).encode()) as (base_url, _):
        turn = OpenAIPolicy("tiny", base_url=base_url, max_retries=0).act([_obs("Hi.")])[0]
    assert turn.usage == {"input_tokens": 12, "cached_tokens": None, "output_tokens": None}
    assert turn.items == [{"type": "message", "role": "assistant", "content": "ok"}]
    with _scripted_server(json.dumps(_chat_reply(usage="lots")).encode()) as (base_url, _):
        assert OpenAIPolicy("tiny", base_url=base_url, max_retries=0).act([_obs("Hi.")])[0].usage is None


MALFORMED_CHAT = {
    "choices a string": {**_chat_reply(), "choices": "abc"},
    "choices [5]": {**_chat_reply(), "choices": [5]},
    "no choices": {**_chat_reply(), "choices": []},
    "message null": {**_chat_reply(), "choices": [{"index": 0, "message": None}]},
    "content 5": _chat_reply({"role": "assistant", "content": 5}),
    "content a list": _chat_reply({"role": "assistant", "content": [{"type": "text"}]}),
    "tool_calls a string": _chat_reply({"role": "assistant", "content": None, "tool_calls": "abc"}),
    "tool_calls [7]": _chat_reply({"role": "assistant", "content": None, "tool_calls": [7]}),
    "logprobs of the wrong shape": {
        **_chat_reply(),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "logprobs": {"content": [3]}}],
    },
}


@pytest.mark.parametrize("body", list(MALFORMED_CHAT.values()), ids=list(MALFORMED_CHAT))
def test_a_malformed_chat_reply_is_an_http_policy_error_naming_endpoint_and_model(body):
    with _scripted_server(json.dumps(body).encode()) as (base_url, _):
        with pytest.raises(HTTPPolicyError, match=r"/chat/completions \(model 'tiny'\): malformed reply"):
            OpenAIPolicy("tiny", base_url=base_url, max_retries=0).act([_obs("Hi.")])


@pytest.mark.parametrize(
    ("api", "body", "match"),
    [
        ("chat", b"", "not JSON"),
        ("chat", b'{"choices": [', "not JSON"),
        ("chat", b"[1, 2]", "list, not a JSON object"),
        ("responses", json.dumps(_chat_reply()).encode(), "malformed reply .*no list of output items"),
        ("responses", b'{"output": [{"type": "message", "content": 5}]}', "malformed reply"),
        ("responses", b'{"output": "abc"}', "malformed reply"),
    ],
)
def test_an_unreadable_reply_is_an_http_policy_error(api, body, match):
    with _scripted_server(body) as (base_url, _):
        with pytest.raises(HTTPPolicyError, match=match) as excinfo:
            OpenAIPolicy("tiny", base_url=base_url, api=api, max_retries=0).act([_obs("Hi.")])
    assert base_url in str(excinfo.value) and "'tiny'" in str(excinfo.value)


def test_a_trickling_server_is_cut_off_at_the_deadline():
    """One byte every 0.2 s of a 2 kB reply would take 400 s; the 1 s deadline ends it."""
    body = json.dumps(_chat_reply({"role": "assistant", "content": "x" * 2000})).encode()
    with _scripted_server(body, trickle_s=0.2) as (base_url, _):
        with pytest.raises(HTTPPolicyError, match=r"not complete after 1 s; cut off"):
            OpenAIPolicy("tiny", base_url=base_url, max_retries=0, timeout_s=1.0).act([_obs("Hi.")])


def test_a_reply_over_the_size_cap_is_refused():
    body = json.dumps(_chat_reply({"role": "assistant", "content": "x" * 300_000})).encode()
    with _scripted_server(body) as (base_url, _):
        policy = OpenAIPolicy("tiny", base_url=base_url, max_retries=0, max_reply_bytes=100_000)
        with pytest.raises(HTTPPolicyError, match=r"over 100,000 bytes"):
            policy.act([_obs("Hi.")])
        assert OpenAIPolicy("tiny", base_url=base_url, max_retries=0).act([_obs("Hi.")])[0].items


def test_a_retry_after_beyond_two_minutes_fails_at_once_and_says_so():
    """As the module docstring says: the client does not wait 100,000 s, and the error gives the delay."""
    body = b'{"error": {"message": "busy"}}'
    with _scripted_server(body, status=503, headers={"retry-after": "100000"}) as (base_url, hits):
        with pytest.raises(HTTPPolicyError, match=r"HTTP 503.*retry after 100000 s; this client waits at most 120 s"):
            OpenAIPolicy("tiny", base_url=base_url, max_retries=3).act([_obs("Hi.")])
    assert len(hits) == 1
    with _scripted_server(body, status=503, headers={"retry-after": "0.1"}) as (base_url, hits):
        with pytest.raises(HTTPPolicyError, match="HTTP 503"):
            OpenAIPolicy("tiny", base_url=base_url, max_retries=2).act([_obs("Hi.")])
    assert len(hits) == 3


def _submit_reply(usage: object) -> bytes:
    call = {"id": "call_1", "type": "function", "function": {"name": "submit", "arguments": '{"answer": "x"}'}}
    return json.dumps(_chat_reply({"role": "assistant", "content": None, "tool_calls": [call]}, usage=usage)).encode()


def test_eval_keeps_episodes_with_bad_usage_and_resumes_a_folder_an_older_version_poisoned(tmp_path, capsys):
    from rl_compaction.cli import main

    out = tmp_path / "eval"
    with _scripted_server(_submit_reply({"prompt_tokens": 9, "completion_tokens": "x"})) as (base_url, _):
        argv = ["eval", "--policy", "openai:tiny", "--base-url", base_url, "--env", "probe", "--episodes", "1"]
        argv += ["--max-turns", "3", "--output-dir", str(out)]
        assert main(argv) == 0
        metrics = json.loads((out / "metrics.json").read_text())["policies"]["openai:tiny@evolve"]
        assert metrics["episodes"] == 1 and metrics["provider_usage"]["output_tokens"] == 0
        # what an older version stored: the raw string; every later --resume of the folder died on it
        lines = (out / "episodes.jsonl").read_text().splitlines()
        record = json.loads(lines[0])
        for invocation in record["invocations"]:
            invocation["usage"] = {"input_tokens": 9, "cached_tokens": None, "output_tokens": "x"}
        (out / "episodes.jsonl").write_text(json.dumps(record) + "\n")
        assert main([*argv, "--resume", "--episodes", "2"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())["policies"]["openai:tiny@evolve"]
    assert metrics["episodes"] == 2 and metrics["provider_usage"]["input_tokens"] == 9 * 2 * len(record["invocations"])
    capsys.readouterr()


def test_eval_reports_a_failing_server_on_one_line(tmp_path, capsys):
    from rl_compaction.cli import main

    with _scripted_server(b'{"error": {"message": "bad request"}}', status=400) as (base_url, _):
        argv = ["eval", "--policy", "openai:tiny", "--base-url", base_url, "--env", "probe", "--episodes", "1"]
        assert main([*argv, "--output-dir", str(tmp_path / "eval")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert any("HTTP 400" in line and "'tiny'" in line and "--resume continues" in line for line in err.splitlines())


def test_eval_of_a_reply_of_a_million_spaces_finishes(tmp_path, capsys):
    """The o200k encoder panicked on such text, out of every guard, in eval and again on --resume."""
    from rl_compaction.cli import main

    body = json.dumps(_chat_reply({"role": "assistant", "content": " " * 1_000_000})).encode()
    with _scripted_server(body) as (base_url, _):
        argv = ["eval", "--policy", "openai:tiny", "--base-url", base_url, "--env", "probe", "--episodes", "1"]
        assert main([*argv, "--max-turns", "2", "--output-dir", str(tmp_path / "eval")]) == 0
    assert (
        json.loads((tmp_path / "eval" / "metrics.json").read_text())["policies"]["openai:tiny@evolve"]["episodes"] == 1
    )
    capsys.readouterr()
