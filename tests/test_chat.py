"""Prompts and completion parsing for local models: Qwen2.5-style (hermes), Llama-3.1-style,
SmolLM2's tool-less ChatML (fallback) and Mistral-style tool calls, on real tokenizers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers
from packaging.version import Version
from transformers import AutoTokenizer

from rl_compaction.accounting import ChatTemplateCounter
from rl_compaction.chat import (
    detect_format,
    fallback_messages,
    mistral_call_id,
    parse_completion,
    prompt_ids,
    render_prompt,
)
from rl_compaction.core.render import chat_messages
from rl_compaction.core.state import validate_state
from rl_compaction.harness.env import CompactionEnv, EnvConfig
from rl_compaction.harness.oracle import OraclePolicy
from rl_compaction.harness.tasks import SUBMIT_TOOL, Difficulty, function_tool
from rl_compaction.models.tiny import build_tiny_tokenizer
from rl_compaction.protocol.evolve import EVOLVE_TOOL

SMOLLM2_TEMPLATE = (Path(__file__).parent / "data" / "templates" / "smollm2.jinja").read_text()

# A Mistral-style template: [TOOL_CALLS] JSON lists, and (as Mistral's own) only 9-character call ids.
MISTRAL_TEMPLATE = """\
{%- for message in messages %}
    {%- if message.role == 'user' or message.role == 'system' %}{{- '[INST] ' + message.content + '[/INST]' }}
    {%- elif message.role == 'assistant' and message.tool_calls %}{{- '[TOOL_CALLS] [' }}
        {%- for tc in message.tool_calls %}
            {%- if tc.id | length != 9 %}{{- raise_exception('Tool call IDs should be 9 characters') }}{%- endif %}
            {{- '{"name": "' + tc.function.name + '", "arguments": ' + (tc.function.arguments | tojson) }}
            {{- ', "id": "' + tc.id + '"}' }}{{- ', ' if not loop.last }}
        {%- endfor %}{{- ']</s>' }}
    {%- elif message.role == 'assistant' %}{{- message.content + '</s>' }}
    {%- elif message.role == 'tool' %}
        {%- if message.tool_call_id | length != 9 %}{{- raise_exception('bad tool_call_id') }}{%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + (message.content | tojson) + ', "call_id": "' + message.tool_call_id }}
        {{- '"}[/TOOL_RESULTS]' }}
    {%- endif %}
{%- endfor %}
{%- if tools %}{{- '[AVAILABLE_TOOLS] ' + (tools | tojson) + '[/AVAILABLE_TOOLS]' }}{%- endif %}
"""

INSTRUCTIONS = "You are a careful agent. Keep exact identifiers."
SEARCH_TOOL = function_tool("search", "Search the archive.", {"query": {"type": "string"}}, ["query"])
TOOLS = [SEARCH_TOOL, SUBMIT_TOOL, EVOLVE_TOOL]
# JavaScript with everything that breaks naive escaping: quotes, backslashes, newlines, tabs,
# unicode, template markers and a closing tool_call tag inside a string.
CODE = (
    'const re = /"(\\d+)"\\s*\\\\n/g;\n'
    '\tconst s = \'it\\\'s "quoted" </tool_call> {"name": 1}\';\n'
    "return state.filter(x => !JSON.stringify(x).includes('naïve 東京 🙂 \\u00e9'));"
)


def _call(call_id: str, name: str, **args) -> dict:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(args)}


def _out(call_id: str, output: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


STATE = validate_state(
    [
        {"type": "message", "role": "user", "content": "Find invoice INV-0042 and report who approved it."},
        {"type": "message", "role": "assistant", "content": "I will search two archives."},
        _call("c_a", "search", query='invoice "INV-0042"'),
        _call("c_b", "search", query="approvals 2024\\Q1"),
        _out("c_a", '{"id": "INV-0042", "amount": 1250.75}'),
        _out("c_b", "approved by Dana Ruiz\non 2024-03-02"),
        _call("c_e", "evolve", code=CODE),
        _out("c_e", '{"applied": true, "before_tokens": 900, "after_tokens": 700}'),
        {"type": "message", "role": "assistant", "content": "Dana Ruiz approved it."},
        {"type": "message", "role": "user", "content": "Thanks. Submit it."},
        _call("c_s", "submit", answer="Dana Ruiz"),
        _out("c_s", "Answer submitted."),
    ]
)


def _relabel(state: list[dict]) -> list[dict]:
    """call_ids renamed call_0, call_1, ... in order of the calls."""
    names = {}
    for item in state:
        if item["type"] == "function_call":
            names[item["call_id"]] = f"call_{len(names)}"
    out = []
    for item in state:
        item = dict(item)
        if "call_id" in item:
            item["call_id"] = names[item["call_id"]]
        if item["type"] == "function_call":
            item["arguments"] = json.dumps(json.loads(item["arguments"]), ensure_ascii=False)
        out.append(item)
    return out


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """Qwen2.5-style, Llama-3.1-style, SmolLM2 (no tools) and Mistral-style tokenizers."""
    chatml = tmp_path_factory.mktemp("chatml")
    llama = tmp_path_factory.mktemp("llama3")
    build_tiny_tokenizer(chatml, "chatml")
    build_tiny_tokenizer(llama, "llama3")
    toks = {
        "qwen": AutoTokenizer.from_pretrained(chatml, local_files_only=True),
        "llama": AutoTokenizer.from_pretrained(llama, local_files_only=True),
        "smol": AutoTokenizer.from_pretrained(chatml, local_files_only=True),
        "mistral": AutoTokenizer.from_pretrained(chatml, local_files_only=True),
    }
    toks["smol"].chat_template = SMOLLM2_TEMPLATE
    toks["mistral"].chat_template = MISTRAL_TEMPLATE
    return toks


# --------------------------------------------------------------------------- detection and prompts


def test_detect_format_from_templates(tokenizers):
    assert {k: detect_format(t) for k, t in tokenizers.items()} == {
        "qwen": "hermes",
        "llama": "llama3_json",
        "smol": "fallback",
        "mistral": "mistral",
    }
    # tool-capable, but a call syntax none of the parsers reads: driven with the fallback format
    assert detect_format("{% for m in messages %}{{ m.tool_calls }}{% endfor %}{{ tools }}") == "fallback"
    assert detect_format("{% for m in messages %}{{ m.content }}{% endfor %}") == "fallback"
    with pytest.raises(ValueError, match="empty"):
        detect_format("")
    with pytest.raises(ValueError, match="unknown chat format 'qwen'"):
        parse_completion("hi", "qwen")


@pytest.mark.parametrize("name", ["qwen", "llama", "smol", "mistral"])
def test_prompt_ids_equal_the_accounting_counter(tokenizers, name):
    tok = tokenizers[name]
    counter = ChatTemplateCounter(tok)
    ids = prompt_ids(tok, INSTRUCTIONS, TOOLS, STATE)
    assert ids == counter.input_ids(INSTRUCTIONS, TOOLS, STATE) == counter.input_ids_full(INSTRUCTIONS, TOOLS, STATE)
    text = render_prompt(tok, INSTRUCTIONS, TOOLS, STATE)
    assert tok.decode(ids) == text
    assert counter.render(INSTRUCTIONS, TOOLS, STATE) == text


def test_native_prompts_carry_tools_and_generation_prompt(tokenizers):
    qwen = render_prompt(tokenizers["qwen"], INSTRUCTIONS, TOOLS, STATE)
    assert qwen.endswith("<|im_start|>assistant\n") and '"name": "evolve"' in qwen
    llama = render_prompt(tokenizers["llama"], INSTRUCTIONS, TOOLS, STATE)
    assert llama.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n") and '"parameters"' in llama


def test_fallback_prompt_writes_tools_calls_and_outputs_as_text(tokenizers):
    text = render_prompt(tokenizers["smol"], INSTRUCTIONS, TOOLS, STATE)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n" + INSTRUCTIONS + "\n\n# Tools")
    assert "<tools>" in system and '"name": "evolve"' in system and "<tool_call>" in system
    assert "SmolLM" not in text  # the instructions are the system message
    # the two parallel outputs share one user turn, one block each, in call order
    assert (
        '<|im_start|>user\n<tool_response>\n{"id": "INV-0042", "amount": 1250.75}\n</tool_response>\n'
        "<tool_response>\napproved by Dana Ruiz\non 2024-03-02\n</tool_response><|im_end|>"
    ) in text
    assert (
        '<|im_start|>assistant\nI will search two archives.\n<tool_call>\n{"name": "search", "arguments": '
        '{"query": "invoice \\"INV-0042\\""}}\n</tool_call>\n<tool_call>'
    ) in text
    assert text.endswith("<|im_start|>assistant\n")


def test_fallback_without_tools_leaves_the_system_message_alone(tokenizers):
    messages = chat_messages(INSTRUCTIONS, STATE[:1])
    assert fallback_messages(messages, []) == messages
    with pytest.raises(ValueError, match="system message first"):
        fallback_messages(messages[1:], TOOLS)


def test_mistral_prompt_uses_nine_character_ids(tokenizers):
    text = render_prompt(tokenizers["mistral"], INSTRUCTIONS, TOOLS, STATE)
    assert f'"id": "{mistral_call_id("c_a")}"' in text and f'"call_id": "{mistral_call_id("c_b")}"' in text
    assert len(mistral_call_id("c_a")) == 9 and mistral_call_id("c_a").isalnum()
    assert mistral_call_id("c_a") != mistral_call_id("c_b")


# --------------------------------------------------------------------------- round trips


def _rendered_pieces(state: list[dict]) -> list[str]:
    """What the prompt must show of each item: a message's text, a call's arguments as JSON, an output."""
    pieces = []
    for item in state:
        if item["type"] == "message":
            pieces.append(item["content"])
        elif item["type"] == "function_call":
            pieces += [item["name"], json.dumps(json.loads(item["arguments"]), ensure_ascii=False)]
        else:
            pieces.append(item["output"])
    return pieces


@pytest.mark.parametrize("name", ["qwen", "llama", "smol"])  # the Mistral-style one drops text beside calls
def test_the_prompt_shows_every_item_exactly_and_in_order(tokenizers, name):
    text = render_prompt(tokenizers[name], INSTRUCTIONS, TOOLS, STATE)
    pos = text.index(INSTRUCTIONS)
    for piece in _rendered_pieces(STATE):
        found = text.find(piece, pos)
        assert found != -1, f"{piece[:60]!r} is missing from the {name} prompt, or out of order"
        pos = found + len(piece)


@pytest.mark.parametrize("name", ["qwen", "llama", "smol", "mistral"])
def test_a_rendered_assistant_turn_parses_back_to_its_items(tokenizers, name):
    """What a template renders for an assistant turn is what a model trained on it emits."""
    tok = tokenizers[name]
    opening = STATE[:1]
    turn = [{"type": "message", "role": "assistant", "content": "Compacting now."}, _call("c_x", "evolve", code=CODE)]
    if name == "mistral":  # this Mistral-style template renders calls without the text beside them
        turn = turn[1:]
    prompt = render_prompt(tok, "", [], opening)
    full = render_prompt(tok, "", [], opening + turn, add_generation_prompt=False)
    assert full.startswith(prompt)
    parsed = parse_completion(full[len(prompt) :], tok)
    assert parsed.parse_errors == []
    assert [{k: v for k, v in x.items() if k != "call_id"} for x in parsed.items] == [
        {k: v for k, v in x.items() if k != "call_id"} for x in _relabel(turn)
    ]


# --------------------------------------------------------------------------- completion parsing


def _calls(parsed) -> list[tuple[str, dict]]:
    return [(x["name"], json.loads(x["arguments"])) for x in parsed.items if x["type"] == "function_call"]


def _message(parsed) -> str | None:
    texts = [x["content"] for x in parsed.items if x["type"] == "message"]
    assert len(texts) <= 1 and all(x["type"] == "function_call" for x in parsed.items[len(texts) :])
    return texts[0] if texts else None


def test_hermes_several_calls_with_text_around_and_end_of_turn():
    text = (
        "Let me look.\n<tool_call>\n"
        + json.dumps({"name": "search", "arguments": {"query": "a"}})
        + "\n</tool_call>\n<tool_call>"
        + json.dumps({"name": "evolve", "arguments": {"code": CODE}}, ensure_ascii=False)
        + "</tool_call>\nDone.<|im_end|>\n<|im_start|>user\nignored"
    )
    parsed = parse_completion(text, "hermes")
    assert parsed.parse_errors == [] and parsed.error is None and parsed.parser == "hermes"
    assert _message(parsed) == "Let me look.\nDone."
    assert _calls(parsed) == [("search", {"query": "a"}), ("evolve", {"code": CODE})]
    ids = [x["call_id"] for x in parsed.items if x["type"] == "function_call"]
    assert len(set(ids)) == 2 and ids == [x["call_id"] for x in parse_completion(text, "hermes").items[1:]]
    assert ids != [x["call_id"] for x in parse_completion(text.replace("Done.", "Ok."), "hermes").items[1:]]
    answered = parsed.items + [_out(i, "ok") for i in ids]
    assert validate_state(answered) == answered  # valid State items once answered


@pytest.mark.parametrize("fmt", ["hermes", "fallback"])
def test_code_with_raw_newlines_and_escapes_survives_exactly(fmt):
    # Models often write real newlines inside JSON strings; the code must come back byte for byte.
    raw = '<tool_call>\n{"name": "evolve", "arguments": {"code": "const a = \\"x\\\\y\\";\n\treturn state; // é 🙂"}}'
    parsed = parse_completion(raw, fmt)
    assert _calls(parsed) == [("evolve", {"code": 'const a = "x\\y";\n\treturn state; // é 🙂'})]
    assert _message(parsed) is None  # no closing tag at the very end is accepted


def test_arguments_given_as_a_json_string_and_missing_arguments():
    text = '<tool_call>{"name": "evolve", "arguments": "{\\"code\\": \\"return state;\\"}"}</tool_call>'
    assert _calls(parse_completion(text, "hermes")) == [("evolve", {"code": "return state;"})]
    assert _calls(parse_completion('<tool_call>{"name": "noop"}</tool_call>', "hermes")) == [("noop", {})]


BAD_HERMES = {
    "truncated": '<tool_call>\n{"name": "evolve", "arguments": {"code": "return st',
    "bad json": '<tool_call>{"name": "evolve", "arguments": {code: 1}}</tool_call>',
    "not an object": '<tool_call>["evolve", {"code": "x"}]</tool_call>',
    "array arguments": '<tool_call>{"name": "evolve", "arguments": [1, 2]}</tool_call>',
    "no name": '<tool_call>{"arguments": {}}</tool_call>',
    "text inside the block": '<tool_call>{"name": "a", "arguments": {}} and more</tool_call>',
    "stray close": 'oops </tool_call> {"name": "a"}',
    "one good one bad": '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": </tool_call>',
}


@pytest.mark.parametrize("case", BAD_HERMES)
def test_malformed_calls_become_the_raw_text_with_a_parse_error(case):
    text = BAD_HERMES[case]
    parsed = parse_completion(text + "<|im_end|>", "hermes")
    assert parsed.items == [{"type": "message", "role": "assistant", "content": text.strip()}]
    assert len(parsed.parse_errors) == 1 and parsed.error == parsed.parse_errors[0]


def test_llama3_json_calls():
    args = {"code": CODE}
    one = parse_completion(
        '<|python_tag|>{"name": "evolve", "parameters": ' + json.dumps(args) + "}<|eom_id|>", "llama3_json"
    )
    assert _calls(one) == [("evolve", args)] and _message(one) is None
    many = parse_completion(
        'Checking both.\n{"name": "search", "parameters": {"query": "a"}}; {"name": "search", "arguments": {"query": '
        '"b"}}\n{"name": "submit", "parameters": {"answer": "x"}}\nThat is all.<|eot_id|>junk',
        "llama3_json",
    )
    assert _calls(many) == [("search", {"query": "a"}), ("search", {"query": "b"}), ("submit", {"answer": "x"})]
    assert _message(many) == "Checking both.\nThat is all."
    prose = parse_completion('Use {"name": "search", "parameters": {}} when unsure.', "llama3_json")
    assert _calls(prose) == [] and prose.parse_errors == []  # mid-line JSON is prose, not a call
    for bad in ('{"name": "evolve", "parameters": {"code": "ret', '{"name": "Ada", "age": 3}'):
        parsed = parse_completion(bad, "llama3_json")
        assert parsed.items == [{"type": "message", "role": "assistant", "content": bad}] and parsed.parse_errors


def test_mistral_calls():
    listed = parse_completion(
        'Sure. [TOOL_CALLS] [{"name": "search", "arguments": {"query": "a"}, "id": "abcdefghi"}, '
        '{"name": "evolve", "arguments": ' + json.dumps({"code": CODE}) + "}]</s>",
        "mistral",
    )
    assert _calls(listed) == [("search", {"query": "a"}), ("evolve", {"code": CODE})]
    assert _message(listed) == "Sure."
    v11 = parse_completion('[TOOL_CALLS]search[ARGS]{"query": "a"}[TOOL_CALLS]submit[ARGS]{"answer": "b"}', "mistral")
    assert _calls(v11) == [("search", {"query": "a"}), ("submit", {"answer": "b"})]
    for bad in ('[TOOL_CALLS] [{"name": "search", "arguments": {"qu', "[TOOL_CALLS] nothing here", "[TOOL_CALLS] {}"):
        parsed = parse_completion(bad, "mistral")
        assert parsed.items == [{"type": "message", "role": "assistant", "content": bad}] and parsed.parse_errors


def test_reasoning_end_markers_and_empty_output(tokenizers):
    thought = parse_completion("<think>\nplan the edit\n</think>\n\nHere it is.<|im_end|>", "hermes")
    assert thought.reasoning == "plan the edit" and _message(thought) == "Here it is."
    after_prompt = '\nplan</think><tool_call>{"name": "a", "arguments": {}}</tool_call>'
    opened_in_prompt = parse_completion(after_prompt, "hermes", prompt="<|im_start|>assistant\n<think>\n")
    assert opened_in_prompt.reasoning == "plan" and _calls(opened_in_prompt) == [("a", {})]
    assert parse_completion("text <think>x</think> more", "hermes").reasoning is None
    # a closing think tag inside code is code, unless the prompt opened a think block
    code = "return state; // </think>"
    call = parse_completion(f'<tool_call>{{"name": "evolve", "arguments": {{"code": "{code}"}}}}</tool_call>', "hermes")
    assert call.reasoning is None and _calls(call) == [("evolve", {"code": code})]
    empty = parse_completion("<|im_end|>", "hermes")
    assert empty.items == [{"type": "message", "role": "assistant", "content": ""}] and not empty.parse_errors
    # the tokenizer's own eos counts as an end of turn too
    llama = tokenizers["llama"]
    assert _message(parse_completion(f"Answer.{llama.eos_token} trailing", llama)) == "Answer."
    with pytest.raises(ValueError, match="string"):
        parse_completion([1, 2], "hermes")


HERMES_RESPONSE_TEMPLATE = {
    "start_anchor": "<|im_start|>assistant\n",
    "defaults": {"role": "assistant"},
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open": "<tool_call>",
            "close": "</tool_call>",
            "content": "json",
            "repeats": True,
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close": "<|im_end|>"},
    },
}


@pytest.mark.skipif(
    Version(transformers.__version__) < Version("5.13"), reason="response_template parsing needs transformers>=5.13"
)
def test_transformers_response_template_is_used_when_present(tmp_path):
    build_tiny_tokenizer(tmp_path, "chatml")
    tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    tok.response_template = HERMES_RESPONSE_TEMPLATE
    code = CODE.replace("</tool_call>", "")

    def completion(code: str) -> str:
        call = json.dumps({"name": "evolve", "arguments": {"code": code}})
        return f"<think>check</think>Compacting.\n<tool_call>\n{call}\n</tool_call><|im_end|>"

    prompt = render_prompt(tok, INSTRUCTIONS, TOOLS, STATE)
    native = parse_completion(completion(code), tok, prompt=prompt, tools=TOOLS)
    ours = parse_completion(completion(code), "hermes")
    assert native.parser == "response_template" and native.parse_errors == []
    assert native.items == ours.items and native.reasoning == ours.reasoning == "check"
    assert _calls(native) == [("evolve", {"code": code})]
    # the library's region parser ends the call at a </tool_call> inside the code string; ours reads it
    recovered = parse_completion(completion(CODE), tok, prompt=prompt, tools=TOOLS)
    assert recovered.parser == "hermes" and recovered.parse_errors == []
    assert _calls(recovered) == [("evolve", {"code": CODE})]
    # the library parser raises on bad JSON: our parser takes over and reports both failures
    bad = parse_completion('<tool_call>{"name": "x", "arguments": {bad}}</tool_call>', tok, prompt=prompt)
    assert bad.parser == "hermes" and len(bad.parse_errors) == 2
    assert bad.parse_errors[0].startswith("response_template: ValueError")


@pytest.mark.parametrize("name", ["smol", "llama"])
def test_env_episode_driven_through_text(tokenizers, name):
    """A local-model loop without a model: the oracle's turns are written as the template renders
    them, parsed back from text, and stepped; the env's token ids are the policy's prompt ids."""
    tok = tokenizers[name]
    difficulty = Difficulty(scale=0.06, level=1)
    config = EnvConfig(context_window=8000, compaction_threshold=3000)  # the episode peaks near 6k tokens
    env = CompactionEnv("probe", split="test", difficulty=difficulty, config=config, counter=ChatTemplateCounter(tok))
    obs, _ = env.reset(seed=0)
    policy = OraclePolicy(env.task.oracle(), env, use_evolve=True)
    done, turns = False, 0
    while not done:
        ids = prompt_ids(tok, obs["instructions"], obs["tools"], obs["state"])
        assert ids == env.counter.input_ids(obs["instructions"], obs["tools"], obs["state"])
        prompt = tok.decode(ids)
        items = policy.act(obs)
        rendered = render_prompt(
            tok, obs["instructions"], obs["tools"], obs["state"] + items, add_generation_prompt=False
        )
        parsed = parse_completion(rendered[len(prompt) :], tok, prompt=prompt)
        assert parsed.parse_errors == []
        assert [(x["type"], x.get("name")) for x in parsed.items] == [(x["type"], x.get("name")) for x in items]
        obs, _, terminated, truncated, info = env.step({"items": parsed.items, "input_ids": ids})
        done, turns = terminated or truncated, turns + 1
    assert info["success"] and turns > 2
    # the oracle's evolve code went through text and back and applied at each compaction request
    evolve_ids = {x["call_id"] for x in env.history if x.get("name") == "evolve"}
    receipts = [json.loads(x["output"]) for x in env.history if x.get("output") and x["call_id"] in evolve_ids]
    assert receipts and all(r["applied"] for r in receipts)
