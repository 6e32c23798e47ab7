"""A policy backed by any OpenAI-compatible HTTP endpoint (OpenAI, vLLM, `transformers serve`, ...).

Two wire formats, chosen with ``api``:

- ``"chat"``: chat completions. The State is rendered with `rl_compaction.render.chat_messages`
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
jitter, or the server's ``Retry-After``); other errors fail at once. Any failure raises
`HTTPPolicyError`, whose message names the endpoint, the model and the cause.
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
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from rl_compaction.policies.base import Policy, Turn
from rl_compaction.render import chat_messages, chat_tools
from rl_compaction.state import State

API_KINDS = ("chat", "responses")
#: The fields of a State ``reasoning`` item (see `rl_compaction.state`); others are dropped.
_REASONING_FIELDS = ("type", "id", "summary", "content", "encrypted_content", "status")


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


def _usage(input_tokens: Any, cached_tokens: Any, output_tokens: Any) -> dict[str, Any]:
    return {"input_tokens": input_tokens, "cached_tokens": cached_tokens, "output_tokens": output_tokens}


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
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if base_url is None:
                raise ValueError("no API key for the OpenAI API: pass api_key or set OPENAI_API_KEY")
            api_key = "EMPTY"  # the value servers without authentication conventionally ignore
        self.model, self.api = model, api
        self.temperature, self.top_p, self.max_output_tokens = temperature, top_p, max_output_tokens
        self.logprobs, self.timeout_s, self.max_retries = logprobs, timeout_s, max_retries
        self.max_concurrency = max_concurrency
        self.extra_body = dict(extra_body or {})
        self.name = f"openai-{api}:{model}"
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries)
        path = "/chat/completions" if api == "chat" else "/responses"
        self.endpoint = str(self._client.base_url).rstrip("/") + path

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

    def _call(self, create: Callable[..., Any], expected: type, **kwargs: Any) -> tuple[Any, float]:
        """Send one request; map every client error to an `HTTPPolicyError` that names endpoint and model."""
        where = f"{self.api} request to {self.endpoint} (model {self.model!r})"
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        start = time.perf_counter()
        try:
            reply = create(**kwargs)
        except openai.APIStatusError as e:
            raise HTTPPolicyError(f"{where} failed with HTTP {e.status_code}: {e.message}") from e
        except openai.APITimeoutError as e:
            raise HTTPPolicyError(f"{where} timed out after {self.timeout_s:g} s ({self.max_retries} retries)") from e
        except openai.APIConnectionError as e:
            cause = e.__cause__ or e
            raise HTTPPolicyError(f"{where}: cannot connect ({cause}) after {self.max_retries} retries") from e
        except openai.APIError as e:
            raise HTTPPolicyError(f"{where} failed: {e}") from e
        latency = time.perf_counter() - start
        if not isinstance(reply, expected):
            raise HTTPPolicyError(f"{where}: unexpected reply {str(reply)[:200]!r}")
        return reply, latency

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
        completion, latency = self._call(self._client.chat.completions.create, ChatCompletion, **kwargs)
        if not completion.choices:
            raise HTTPPolicyError(f"chat request to {self.endpoint} (model {self.model!r}) returned no choices")
        choice = completion.choices[0]
        message = choice.message.model_dump(mode="json")
        items, malformed = items_from_chat_message(message)
        logprobs = None
        if choice.logprobs is not None and choice.logprobs.content:
            logprobs = [float(t.logprob) for t in choice.logprobs.content]
        usage = None
        if completion.usage is not None:
            details = completion.usage.prompt_tokens_details
            cached = details.cached_tokens if details is not None else None
            usage = _usage(completion.usage.prompt_tokens, cached, completion.usage.completion_tokens)
        extra: dict[str, Any] = {"api": "chat", "id": completion.id, "finish_reason": choice.finish_reason}
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            content = [{"type": "reasoning_text", "text": reasoning}]
            extra["reasoning"] = [{"type": "reasoning", "id": f"rs_{completion.id}", "summary": [], "content": content}]
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
        response, latency = self._call(self._client.responses.create, Response, **kwargs)
        parsed = items_from_response_output(
            [item.model_dump(mode="json", exclude_none=True) for item in response.output]
        )
        usage = None
        if response.usage is not None:
            details = response.usage.input_tokens_details
            cached = details.cached_tokens if details is not None else None
            usage = _usage(response.usage.input_tokens, cached, response.usage.output_tokens)
        extra: dict[str, Any] = {"api": "responses", "id": response.id, "status": response.status}
        if response.incomplete_details is not None:
            extra["incomplete_reason"] = response.incomplete_details.reason
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
