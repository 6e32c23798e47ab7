"""A policy backed by any OpenAI-compatible HTTP endpoint (OpenAI, vLLM, `transformers serve`, ...).

Two wire formats, chosen with ``api``:

- ``"chat"``: chat completions. The State is rendered with `rl_compaction.core.render.chat_messages`
  and adapted to the wire format: tool-call ``arguments`` go back to the exact JSON *string* of
  the State (the renderer parses them for chat templates), a tool message carries only
  ``tool_call_id`` and content, and an assistant message that only calls tools has ``content:
  null``. Tools are sent with `chat_tools`.
- ``"responses"``: the Responses API. The State is sent as ``input`` unchanged (every valid State
  is a ``ResponseInputParam``), with ``instructions`` and the Responses function tools as they are.

Either way the reply becomes Responses output items the env accepts: an assistant message with
string content and ``function_call`` items with the call ids the server returned. A function call
whose arguments are not a JSON object (a small model's typo) is kept as assistant message text
and listed in ``Turn.extra["malformed_calls"]``, so a bad turn never crashes a rollout. Blank
text beside the calls (servers often return ``""`` there) is dropped, since the env reads any
message next to an evolve call as a second action. Reasoning is kept in ``Turn.extra["reasoning"]``
as State ``reasoning`` items, not in ``Turn.items``: the env takes messages and calls only.

``Turn.usage`` holds what the provider reports, ``{"input_tokens", "cached_tokens",
"output_tokens"}`` (``cached_tokens`` is None when the server does not report it). It is kept
apart from the project's own token counts, which the env computes from the model input. Token
ids are unknown over HTTP, so ``prompt_ids`` / ``completion_ids`` stay None; ``logprobs`` holds
the per-token logprobs of the message text when requested and returned by the server.

Retries: the official client retries connection errors, timeouts, 408/409/429 and 5xx replies
up to ``max_retries`` times with capped exponential backoff (0.5 s doubling to 8 s, with
jitter), or after the server's ``Retry-After`` when that is at most 2 minutes; a longer
``Retry-After`` is not waited for, and the request fails at once with the delay in the message.
Other errors fail at once.

Limits: ``timeout_s`` bounds the wait for the reply's headers and each read, and is also a
deadline for reading the whole body (a server that trickles a byte at a time is cut off), and a
body over ``max_reply_bytes`` is refused unread beyond the cap. Any failure, a malformed reply
(not JSON, or the wrong shapes) included, raises `HTTPPolicyError`, whose message names the
endpoint, the model and the cause. A ``usage`` count that is not a non-negative integer is
recorded as None, and the turn is kept.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessage

from rl_compaction.core.render import chat_messages, chat_tools
from rl_compaction.core.state import State
from rl_compaction.harness.policy import Policy, Turn

API_KINDS = ("chat", "responses")
#: The fields of a State ``reasoning`` item (see `rl_compaction.core.state`); others are dropped.
_REASONING_FIELDS = ("type", "id", "summary", "content", "encrypted_content", "status")


#: Default cap on a reply body: a chat turn is kilobytes; 32 MB leaves room for long logprobs.
MAX_REPLY_BYTES = 32 * 2**20
#: Retry-After values the official client waits for (longer ones fail at once).
MAX_RETRY_AFTER_S = 120


class HTTPPolicyError(RuntimeError):
    """A request to an OpenAI-compatible endpoint failed; the message says where, for which model, and why."""


# --------------------------------------------------------------------------- request building


def chat_request_messages(instructions: str, state: State) -> list[dict[str, Any]]:
    """The chat-completions ``messages`` for `instructions` + `state`, in the OpenAI wire format."""
    raw_arguments = {
        item["call_id"]: item["arguments"]
        for item in state
        if isinstance(item, dict) and item.get("type") == "function_call" and "call_id" in item
    }
    messages = chat_messages(instructions, state)
    for message in messages:
        if message["role"] == "tool":
            message.pop("name", None)
        for call in message.get("tool_calls", ()):
            call["function"]["arguments"] = raw_arguments[call["id"]]
        if message.get("tool_calls") and not message["content"]:
            message["content"] = None
    return messages


def _check_observation(obs: Any, index: int) -> tuple[str, list[dict[str, Any]], State]:
    if not isinstance(obs, dict):
        raise ValueError(
            f"observation {index}: expected a dict with instructions, tools, state; got {type(obs).__name__}"
        )
    missing = [k for k in ("instructions", "tools", "state") if k not in obs]
    if missing:
        raise ValueError(f"observation {index}: missing {', '.join(missing)}")
    instructions, tools, state = obs["instructions"], obs["tools"], obs["state"]
    if not isinstance(instructions, str):
        raise ValueError(f"observation {index}: 'instructions' must be a string, got {type(instructions).__name__}")
    if not isinstance(tools, list):
        raise ValueError(f"observation {index}: 'tools' must be a list, got {type(tools).__name__}")
    if not isinstance(state, list):
        raise ValueError(f"observation {index}: 'state' must be a list of items, got {type(state).__name__}")
    return instructions, tools, state


# --------------------------------------------------------------------------- reply parsing


def _function_call_item(call_id: Any, name: Any, arguments: Any) -> dict[str, Any] | None:
    """A valid ``function_call`` output item, or None when name or arguments are malformed."""
    if not isinstance(name, str) or not name or not isinstance(arguments, str):
        return None
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    if not isinstance(call_id, str) or not call_id:
        call_id = f"call_{uuid.uuid4().hex[:24]}"
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def _malformed_call_text(name: Any, arguments: Any) -> str:
    """What the model emitted for a call that cannot be one, as assistant text it can read back."""
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def _assemble(parts: list[tuple[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Output items for a reply's parts in order, ``("text", str)`` or ``("call", (call_id, name,
    arguments))``; also the malformed calls. Blank text is dropped from a turn that calls tools."""
    has_calls = any(kind == "call" for kind, _ in parts)
    items: list[dict[str, Any]] = []
    malformed: list[dict[str, Any]] = []
    for kind, value in parts:
        if kind == "text":
            if value.strip() or (value and not has_calls):
                items.append({"type": "message", "role": "assistant", "content": value})
            continue
        call_id, name, arguments = value
        item = _function_call_item(call_id, name, arguments)
        if item is None:
            malformed.append({"call_id": call_id, "name": name, "arguments": arguments})
            items.append({"type": "message", "role": "assistant", "content": _malformed_call_text(name, arguments)})
        else:
            items.append(item)
    return items, malformed


def items_from_chat_message(message: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A chat-completions assistant message (as a dict) -> (output items, malformed calls)."""
    parts: list[tuple[str, Any]] = [("text", message.get("content") or message.get("refusal") or "")]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(("call", (call.get("id"), function.get("name"), function.get("arguments"))))
    return _assemble(parts)


def _message_text(item: dict[str, Any]) -> str:
    parts = item.get("content") or []
    if isinstance(parts, str):
        return parts
    return "".join(p.get("text") or p.get("refusal") or "" for p in parts if isinstance(p, dict))


def items_from_response_output(output: list[dict[str, Any]]) -> dict[str, Any]:
    """Responses ``output`` items (as dicts) -> {"items", "text", "reasoning", "malformed", "skipped", "logprobs"}.

    ``text`` is the message text as returned (None without a message); ``logprobs`` is None
    when no message part carried any."""
    parts: list[tuple[str, Any]] = []
    reasoning, skipped, logprobs = [], [], []
    for item in output:
        kind = item.get("type")
        if kind == "message":
            parts.append(("text", _message_text(item)))
            for part in item.get("content") or []:
                if isinstance(part, dict):
                    logprobs.extend(float(lp["logprob"]) for lp in part.get("logprobs") or [])
        elif kind == "function_call":
            parts.append(("call", (item.get("call_id"), item.get("name"), item.get("arguments"))))
        elif kind == "reasoning":
            reasoning.append({k: item[k] for k in _REASONING_FIELDS if k in item})
        else:
            skipped.append(kind)
    items, malformed = _assemble(parts)
    texts = [value for kind, value in parts if kind == "text"]
    return {
        "items": items,
        "text": "".join(texts) if texts else None,
        "reasoning": reasoning,
        "malformed": malformed,
        "skipped": skipped,
        "logprobs": logprobs or None,
    }


def _count(value: Any) -> int | None:
    """A provider's token count, or None for anything that is not a non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_from_reply(usage: Any, api: str) -> dict[str, Any] | None:
    """``{"input_tokens", "cached_tokens", "output_tokens"}`` from a reply's ``usage`` object (chat
    or Responses field names); None without one. A bad count becomes None, never an error."""
    if not isinstance(usage, dict):
        return None
    prompt, completion, details = (
        ("prompt_tokens", "completion_tokens", "prompt_tokens_details")
        if api == "chat"
        else ("input_tokens", "output_tokens", "input_tokens_details")
    )
    cached = usage.get(details)
    return {
        "input_tokens": _count(usage.get(prompt)),
        "cached_tokens": _count(cached.get("cached_tokens")) if isinstance(cached, dict) else None,
        "output_tokens": _count(usage.get(completion)),
    }


def _chat_choice(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(first choice, its message as checked by the SDK's own message type) of a chat reply."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError("no choices in the reply")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise ValueError(f"choices[0] is {type(choice).__name__}, not an object")
    message = ChatCompletionMessage.model_validate(choice.get("message")).model_dump(mode="json")
    return choice, message


def _chat_logprobs(choice: dict[str, Any]) -> list[float] | None:
    content = (choice.get("logprobs") or {}).get("content")
    return [float(t["logprob"]) for t in content] if content else None


def _response_output(data: dict[str, Any]) -> list[dict[str, Any]]:
    output = data.get("output")
    if not isinstance(output, list) or not all(isinstance(x, dict) for x in output):
        raise ValueError("no list of output items in the reply (is it a chat-completions reply?)")
    for item in output:
        if item.get("type") == "message" and not isinstance(item.get("content") or [], (str, list)):
            raise ValueError(f"message content is {type(item['content']).__name__}")
    return output


# --------------------------------------------------------------------------- one request


def request_json(
    create: Callable[..., Any],
    request: dict[str, Any],
    *,
    where: str,
    timeout_s: float,
    max_retries: int,
    max_reply_bytes: int,
) -> tuple[dict[str, Any], float]:
    """(JSON object, latency) of ``create(**request)``, a ``with_streaming_response`` method of an
    ``openai.OpenAI`` built with `timeout_s` and `max_retries`; the body is read under the
    `timeout_s` deadline and the `max_reply_bytes` cap. Every failure is one `HTTPPolicyError` that
    starts with `where` (the endpoint and the model). Shared with the `vllm` policy's server mode,
    so both report a server's failures alike."""
    start = time.perf_counter()
    try:
        with create(**request) as response:
            body = _read_body(response, where, timeout_s, max_reply_bytes)
    except openai.APIStatusError as e:
        raise HTTPPolicyError(f"{where} failed with HTTP {e.status_code}: {e.message}{_retry_note(e)}") from e
    except openai.APITimeoutError as e:
        raise HTTPPolicyError(f"{where} timed out after {timeout_s:g} s ({max_retries} retries)") from e
    except openai.APIConnectionError as e:
        cause = e.__cause__ or e
        raise HTTPPolicyError(f"{where}: cannot connect ({cause}) after {max_retries} retries") from e
    except openai.APIError as e:
        raise HTTPPolicyError(f"{where} failed: {e}") from e
    latency = time.perf_counter() - start
    try:
        data = json.loads(body)
    except ValueError as e:
        raise HTTPPolicyError(f"{where}: the reply is not JSON ({e}): {body[:120]!r}") from None
    if not isinstance(data, dict):
        raise HTTPPolicyError(f"{where}: the reply is {type(data).__name__}, not a JSON object")
    return data, latency


def _read_body(response: Any, where: str, timeout_s: float, max_reply_bytes: int) -> bytes:
    """The body of a streamed reply, cut off past `max_reply_bytes` or `timeout_s` of reading."""
    deadline = time.perf_counter() + timeout_s
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_reply_bytes:
            raise HTTPPolicyError(f"{where}: the reply is over {max_reply_bytes:,} bytes; cut off")
        if time.perf_counter() > deadline:
            raise HTTPPolicyError(f"{where}: the reply was not complete after {timeout_s:g} s; cut off")
        chunks.append(chunk)
    return b"".join(chunks)


def malformed_reply(where: str, error: Exception) -> HTTPPolicyError:
    """The one-line error for a reply of the wrong shape, from the first line of what was wrong."""
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    return HTTPPolicyError(f"{where}: malformed reply ({detail[:200]})")


# --------------------------------------------------------------------------- the policy


class OpenAIPolicy(Policy):
    """One turn per observation from an OpenAI-compatible endpoint; batches run on a thread pool."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api: str = "chat",
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        logprobs: bool = False,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        max_concurrency: int = 8,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        extra_body: dict[str, Any] | None = None,
    ):
        """`base_url` None means OpenAI's own API (or ``OPENAI_BASE_URL``), which needs a key from
        `api_key` or ``OPENAI_API_KEY``; a local server without authentication needs none.
        `extra_body` adds server-specific request fields (e.g. ``{"seed": 0}``)."""
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a non-empty string")
        if api not in API_KINDS:
            raise ValueError(f"api must be one of {', '.join(API_KINDS)}, got {api!r}")
        if base_url is not None and not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if temperature is not None and temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if top_p is not None and not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if max_output_tokens is not None and max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {max_output_tokens}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_reply_bytes < 1:
            raise ValueError(f"max_reply_bytes must be >= 1, got {max_reply_bytes}")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if base_url is None:
                raise ValueError("no API key for the OpenAI API: pass api_key or set OPENAI_API_KEY")
            api_key = "EMPTY"  # the value servers without authentication conventionally ignore
        self.model, self.api = model, api
        self.temperature, self.top_p, self.max_output_tokens = temperature, top_p, max_output_tokens
        self.logprobs, self.timeout_s, self.max_retries = logprobs, timeout_s, max_retries
        self.max_concurrency, self.max_reply_bytes = max_concurrency, max_reply_bytes
        self.extra_body = dict(extra_body or {})
        self.name = f"openai-{api}:{model}"
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries)
        path = "/chat/completions" if api == "chat" else "/responses"
        self.endpoint = str(self._client.base_url).rstrip("/") + path
        self._where = f"{api} request to {self.endpoint} (model {model!r})"

    def act(self, observations: list[dict[str, Any]]) -> list[Turn]:
        """One turn per observation, in order; up to `max_concurrency` requests at a time."""
        if not isinstance(observations, list):
            raise ValueError(f"observations must be a list, got {type(observations).__name__}")
        checked = [_check_observation(obs, i) for i, obs in enumerate(observations)]
        one = self._chat if self.api == "chat" else self._responses
        if len(checked) <= 1:
            return [one(*c) for c in checked]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(checked))) as pool:
            return list(pool.map(lambda c: one(*c), checked))

    def close(self) -> None:
        self._client.close()

    # ----------------------------------------------------------------- one request

    def _sampling(self) -> dict[str, Any]:
        params = {"temperature": self.temperature, "top_p": self.top_p}
        return {k: v for k, v in params.items() if v is not None}

    def _call(self, create: Callable[..., Any], **kwargs: Any) -> tuple[dict[str, Any], float]:
        """Send one request with `request_json`: within the deadline and size cap, every failure an
        `HTTPPolicyError` that names endpoint and model."""
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return request_json(
            create,
            kwargs,
            where=self._where,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            max_reply_bytes=self.max_reply_bytes,
        )

    def _malformed(self, error: Exception) -> HTTPPolicyError:
        return malformed_reply(self._where, error)

    def _chat(self, instructions: str, tools: list[dict[str, Any]], state: State) -> Turn:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": chat_request_messages(instructions, state),
            "stream": False,
            **self._sampling(),
        }
        if tools:
            kwargs["tools"] = chat_tools(tools)
        if self.max_output_tokens is not None:
            kwargs["max_completion_tokens"] = self.max_output_tokens
        if self.logprobs:
            kwargs["logprobs"] = True
        data, latency = self._call(self._client.chat.completions.with_streaming_response.create, **kwargs)
        try:
            choice, message = _chat_choice(data)
            items, malformed = items_from_chat_message(message)
            logprobs = _chat_logprobs(choice)
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # pydantic's ValidationError is a ValueError
            raise self._malformed(e) from None
        usage = usage_from_reply(data.get("usage"), "chat")
        extra: dict[str, Any] = {"api": "chat", "id": data.get("id"), "finish_reason": choice.get("finish_reason")}
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            content = [{"type": "reasoning_text", "text": reasoning}]
            rid = f"rs_{data.get('id')}"
            extra["reasoning"] = [{"type": "reasoning", "id": rid, "summary": [], "content": content}]
        if malformed:
            extra["malformed_calls"] = malformed
        return Turn(
            items=items, text=message.get("content"), logprobs=logprobs, usage=usage, latency_s=latency, extra=extra
        )

    def _responses(self, instructions: str, tools: list[dict[str, Any]], state: State) -> Turn:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "input": state,
            "instructions": instructions,
            "stream": False,
            **self._sampling(),
        }
        if tools:
            kwargs["tools"] = tools
        if self.max_output_tokens is not None:
            kwargs["max_output_tokens"] = self.max_output_tokens
        if self.logprobs:
            kwargs["include"] = ["message.output_text.logprobs"]
        data, latency = self._call(self._client.responses.with_streaming_response.create, **kwargs)
        try:
            parsed = items_from_response_output(_response_output(data))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise self._malformed(e) from None
        usage = usage_from_reply(data.get("usage"), "responses")
        extra: dict[str, Any] = {"api": "responses", "id": data.get("id"), "status": data.get("status")}
        incomplete = data.get("incomplete_details")
        if isinstance(incomplete, dict) and incomplete.get("reason"):
            extra["incomplete_reason"] = incomplete["reason"]
        for key, name in (("reasoning", "reasoning"), ("malformed", "malformed_calls"), ("skipped", "skipped_types")):
            if parsed[key]:
                extra[name] = parsed[key]
        return Turn(
            items=parsed["items"],
            text=parsed["text"],
            logprobs=parsed["logprobs"],
            usage=usage,
            latency_s=latency,
            extra=extra,
        )


def _retry_note(error: openai.APIStatusError) -> str:
    """Why a retryable status was not retried, when the server asked for a wait the client does not make."""
    value = error.response.headers.get("retry-after") if error.response is not None else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return ""
    if seconds is not None and seconds > MAX_RETRY_AFTER_S:
        return f" (the server asked to retry after {seconds:g} s; this client waits at most {MAX_RETRY_AFTER_S} s)"
    return ""
