"""Token accounting on real tokenizers: tiktoken o200k/cl100k estimates and tiny HF chat templates."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from rl_compaction.accounting import (
    CacheModel,
    ChatTemplateCounter,
    Ledger,
    PrefixIndex,
    PresetError,
    ServingShape,
    TiktokenCounter,
    cache_cost,
    compaction_cost,
    default_presets_path,
    edit_metrics,
    get_cache_model,
    get_counter,
    load_presets,
    local_cache_model,
    reusable_prefix,
)
from rl_compaction.core.render import ESTIMATE_GENERATION_PROMPT, chat_messages, chat_tools, estimate_pieces
from rl_compaction.core.state import validate_state
from rl_compaction.harness.tasks import SUBMIT_TOOL, function_tool
from rl_compaction.models.tiny import CHATML_TEMPLATE, build_tiny_tokenizer

INSTRUCTIONS = "You are a careful agent. Keep exact identifiers."
TOOLS = [function_tool("search", "Search the archive.", {"query": {"type": "string"}}, ["query"]), SUBMIT_TOOL]
EVOLVE_CODE = "return state.filter((item, i) => i === 0 || i >= state.length - 4); // ’ 🙂"
UNICODE_TEXT = 'Don’t drop “INV-0042” 🙂🚀 naïve 東京 tab\there \\n not a newline, quote " and \\u00e9 é'


def make_turn(i: int, body: str = "") -> list[dict]:
    call = {
        "type": "function_call",
        "call_id": f"call_{i}",
        "name": "search",
        "arguments": json.dumps({"query": f"invoice {i}"}),
    }
    output = json.dumps({"id": f"INV-{i:04d}", "amount": 17.5 * i, "note": body or f"entry {i} of the ledger " * 6})
    return [call, {"type": "function_call_output", "call_id": f"call_{i}", "output": output}]


def make_state(turns: int) -> list[dict]:
    state = [{"type": "message", "role": "user", "content": "Find the invoice that was refunded twice."}]
    for i in range(turns):
        state += make_turn(i)
    return validate_state(state)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    dirs = {}
    for template in ("chatml", "llama3"):
        path = tmp_path_factory.mktemp(f"tiny_{template}")
        build_tiny_tokenizer(path, template)
        dirs[template] = path
    return dirs


COUNTERS = ["o200k_base", "cl100k_base", "chatml", "llama3"]


@pytest.fixture(params=COUNTERS)
def counter(request, tiny_dirs):
    if request.param in tiny_dirs:
        return get_counter(f"hf:{tiny_dirs[request.param]}")
    return get_counter(request.param)


# --------------------------------------------------------------------------- rendering


def test_chat_messages_groups_calls_maps_roles_and_skips_reasoning():
    state = validate_state(
        [
            {"type": "message", "role": "developer", "content": "Be terse."},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"type": "message", "role": "assistant", "content": "Let me look."},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hidden"}]},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"query": "x"}'},
            {"type": "function_call", "call_id": "c2", "name": "submit", "arguments": '{"answer": "y"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "found"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "ok"}]},
            {"type": "function_call", "call_id": "c3", "name": "search", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c3", "output": "none"},
        ]
    )
    messages = chat_messages("SYS", state)
    assert [m["role"] for m in messages] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
    assert messages[0]["content"] == "SYS" and messages[2]["content"] == "a\nb"
    assistant = messages[3]
    assert assistant["content"] == "Let me look."
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert assistant["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "search", "arguments": {"query": "x"}},
    }
    assert messages[5] == {"role": "tool", "tool_call_id": "c2", "name": "submit", "content": "ok"}
    assert messages[6] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "search", "arguments": {}}}],
    }
    assert "hidden" not in json.dumps(messages)


def test_render_rejects_bad_items_and_tools():
    with pytest.raises(ValueError, match="item 0: unknown item type 'web_search_call'"):
        chat_messages("", [{"type": "web_search_call"}])
    with pytest.raises(ValueError, match="item 0 .*arguments must be a JSON object"):
        chat_messages("", [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}])
    with pytest.raises(ValueError, match="tool 0: only function tools"):
        chat_tools([{"type": "web_search"}])
    assert chat_tools(TOOLS)[0] == {
        "type": "function",
        "function": {k: TOOLS[0][k] for k in ("name", "description", "parameters")},
    }


@pytest.mark.parametrize("template", ["chatml", "llama3"])
def test_hf_ids_equal_apply_chat_template_and_show_tool_calls(tiny_dirs, template):
    counter = get_counter(str(tiny_dirs[template]))  # an existing directory works without "hf:"
    tok = counter.tokenizer
    assert counter.incremental
    evolve = {
        "type": "function_call",
        "call_id": "ev",
        "name": "evolve",
        "arguments": json.dumps({"code": EVOLVE_CODE}),
    }
    state = make_state(3) + [evolve, {"type": "function_call_output", "call_id": "ev", "output": '{"applied": true}'}]
    ids = counter.input_ids(INSTRUCTIONS, TOOLS, state)
    reference = tok.apply_chat_template(
        chat_messages(INSTRUCTIONS, state), tools=chat_tools(TOOLS), add_generation_prompt=True, tokenize=True
    )["input_ids"]
    assert ids == reference == counter.input_ids_full(INSTRUCTIONS, TOOLS, state)
    text = tok.decode(ids, skip_special_tokens=False)
    assert text == counter.render(INSTRUCTIONS, TOOLS, state)
    assert EVOLVE_CODE in text and '"name": "search"' in text and "Search the archive." in text
    # The evolve call costs at least its code, and less than the code plus a small template frame.
    code_tokens = counter.text_tokens(EVOLVE_CODE)
    assert code_tokens < counter.call_tokens(evolve) <= code_tokens + 40


# --------------------------------------------------------------------------- incremental == full


def test_incremental_equals_full_after_appends_and_edits(counter):
    state = make_state(2)
    for i in range(2, 8):
        state = state + make_turn(i)
        assert counter.input_ids(INSTRUCTIONS, TOOLS, state) == counter.input_ids_full(INSTRUCTIONS, TOOLS, state)
    edited = [dict(item) for item in state]
    edited[0]["content"] = "Find the invoice that was refunded three times."  # early edit
    edited[4]["output"] = "[dropped]"  # a middle edit
    for variant in (edited, edited[:-4], edited[:1] + edited[5:], state):  # edits, truncation, deletion, back
        assert counter.input_ids(INSTRUCTIONS, TOOLS, variant) == counter.input_ids_full(INSTRUCTIONS, TOOLS, variant)


def test_an_appended_turn_tokenises_only_new_text(counter, monkeypatch):
    state = make_state(20)
    counter.input_ids(INSTRUCTIONS, TOOLS, state)  # warm the piece cache
    encoded: list[str] = []
    original = counter._encode_batch
    monkeypatch.setattr(counter, "_encode_batch", lambda texts: (encoded.extend(texts), original(texts))[1])
    new_turn = make_turn(99, body="brand new evidence " * 10)
    counter.input_ids(INSTRUCTIONS, TOOLS, state + new_turn)
    rendered_turn = sum(len(json.dumps(item)) for item in new_turn)
    total = len(json.dumps(state))
    assert 0 < sum(map(len, encoded)) < rendered_turn + 200 < total / 5


def test_cached_counts_equal_full_for_values_that_compare_equal_but_render_differently(counter):
    """1, 1.0 and True are equal (and hash alike) in Python but render differently in JSON; so do
    0.0 and -0.0. Content-keyed caching must keep them apart."""
    base = make_state(1)
    for value in (1, 1.0, True, 0.0, -0.0, "1", None, [1], {"a": 1}, [True], [1.0]):
        item = {"type": "function_call", "call_id": "x", "name": "search", "arguments": json.dumps({"v": value})}
        extra = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": str(value)}]}
        state = base + [item, {"type": "function_call_output", "call_id": "x", "output": "ok"}, extra]
        assert counter.input_ids(INSTRUCTIONS, TOOLS, state) == counter.input_ids_full(INSTRUCTIONS, TOOLS, state)
    from rl_compaction.accounting.counters import _frozen

    keys = [_frozen(v) for v in (1, 1.0, True, 0.0, -0.0, "1", None, [1], {"1": 1}, ["l", 1])]
    assert len(set(keys)) == len(keys)


def test_counts_follow_items_changed_in_place(counter):
    """Caches key on content, never on object identity: an item edited in place is re-counted."""
    state = make_state(6)
    before = counter.input_ids(INSTRUCTIONS, TOOLS, state)
    state[3]["output"] = "edited in place " * 5
    state[0]["content"] = "A different task."
    after = counter.input_ids(INSTRUCTIONS, TOOLS, state)
    assert after == counter.input_ids_full(INSTRUCTIONS, TOOLS, state) != before


def test_reused_texts_give_exact_ids_across_lockstep_episodes_and_edits(counter):
    """Many episodes share one counter (as in lockstep rollouts): interleaved growth, early and
    late edits, a common start that ends inside an added token's whitespace, str subclasses."""

    class Text(str):
        pass

    rng = random.Random(5)
    episodes = [make_state(2) for _ in range(4)]
    for step in range(12):
        for e, state in enumerate(episodes):
            choice = rng.random()
            if choice < 0.6:
                state = state + make_turn(100 * e + step, body=rng.choice(["  ", "\n\n", "x <tool_call> y", "z"]) * 3)
            elif choice < 0.8:  # edit an output early or late; trailing whitespace before <|im_end|>
                state = [dict(item) for item in state]
                outputs = [item for item in state if item["type"] == "function_call_output"]
                rng.choice([outputs[0], outputs[-1]])["output"] = "ends with spaces   \n"
            else:
                state = state[:1] + state[3:] if len(state) > 3 else state
            episodes[e] = state
            assert counter.input_ids(INSTRUCTIONS, TOOLS, state) == counter.input_ids_full(INSTRUCTIONS, TOOLS, state)
    odd = make_state(2)
    odd[0] = {**odd[0], "content": Text("a str subclass")}
    assert counter.input_ids(INSTRUCTIONS, TOOLS, odd) == counter.input_ids_full(INSTRUCTIONS, TOOLS, odd)


def test_added_tokens_that_strip_whitespace_stay_incremental(tiny_dirs):
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dirs["chatml"]), local_files_only=True)
    tok.backend_tokenizer.add_special_tokens([AddedToken("<|im_end|>", lstrip=True, rstrip=True, special=True)])
    counter = ChatTemplateCounter(tok)
    assert counter.incremental
    state = [{"role": "user", "content": "hello  \n\t "}, {"role": "assistant", "content": "\u3000 x  "}]
    reference = tok.apply_chat_template(chat_messages("sys  ", state), add_generation_prompt=True)["input_ids"]
    assert "  <|im_end|>" in counter.render("sys  ", [], state)
    assert counter.input_ids("sys  ", [], state) == reference


def test_fallback_to_full_tokenisation_when_chunks_are_not_exact():
    """A Metaspace pre-tokenizer that marks only the text's first word depends on position,
    so encoding stretches separately would differ: the counter must notice and not do it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tok.decoder = decoders.Metaspace(prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<|im_start|>", "<|im_end|>"], show_progress=False)
    tok.train_from_iterator(["hello world user system assistant be brief"] * 10, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", chat_template=CHATML_TEMPLATE)
    counter = ChatTemplateCounter(fast)
    assert not counter.incremental
    state = [{"type": "message", "role": "user", "content": "hello world"}]
    reference = fast.apply_chat_template(chat_messages("be brief", state), add_generation_prompt=True)["input_ids"]
    assert counter.input_ids("be brief", [], state) == reference


# --------------------------------------------------------------------------- cache arithmetic


def test_reusable_prefix_matches_a_plain_loop_on_many_shapes():
    rng = random.Random(3)

    def naive(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    for _ in range(300):
        a = [rng.randrange(4) for _ in range(rng.randrange(0, 300))]
        b = a[: rng.randrange(0, len(a) + 1)] + [rng.randrange(4) for _ in range(rng.randrange(0, 50))]
        assert reusable_prefix(a, b) == naive(a, b) == reusable_prefix(b, a)
        assert reusable_prefix(np.array(a, dtype=np.int64), tuple(b)) == naive(a, b)
    assert reusable_prefix([], [1]) == 0 and reusable_prefix([5, 6], [5, 6]) == 2
    assert cache_cost([1, 2, 3], [1, 2, 9, 9]) == 2


def test_early_edit_breaks_the_cache_and_truncation_keeps_it(counter):
    state = make_state(12)
    early = [dict(item) for item in state]
    early[0]["content"] = "Find the invoice that was refunded once."
    m = edit_metrics(counter, INSTRUCTIONS, TOOLS, state, early, evolve_call_tokens=30, output_weight=4.0)
    assert set(m) == {
        "before_tokens",
        "after_tokens",
        "reusable_prefix_tokens",
        "evolve_call_tokens",
        "cache_cost",
        "compaction_cost",
    }
    header = counter.count(INSTRUCTIONS, TOOLS, [])
    assert m["reusable_prefix_tokens"] < header + 20
    assert m["cache_cost"] == m["after_tokens"] - m["reusable_prefix_tokens"] > 0.95 * (m["after_tokens"] - header)
    assert m["compaction_cost"] == 30 * 4.0 + m["cache_cost"]

    cut = edit_metrics(counter, INSTRUCTIONS, TOOLS, state, state[:-2], evolve_call_tokens=30, output_weight=4.0)
    assert cut["after_tokens"] < cut["before_tokens"]
    # Only the generation prompt after the cut point can differ from the old input.
    assert cut["cache_cost"] <= 8
    assert cut["reusable_prefix_tokens"] >= cut["after_tokens"] - 8


def test_append_costs_only_the_new_tokens(counter, tiny_dirs):
    state = make_state(6)
    old = counter.input_ids(INSTRUCTIONS, TOOLS, state)
    new = counter.input_ids(INSTRUCTIONS, TOOLS, state + make_turn(6))
    if isinstance(counter, TiktokenCounter):
        # The estimate ends with a generation-prompt piece that the next item replaces.
        shared = len(old) - len(counter.encoding.encode_ordinary(ESTIMATE_GENERATION_PROMPT))
        assert reusable_prefix(old, new) == shared
        assert cache_cost(old, new) == len(new) - shared
    elif counter.name.endswith(str(tiny_dirs["chatml"])):
        # ChatML's generation prompt is the start of the assistant turn that follows: old is a prefix of new.
        assert reusable_prefix(old, new) == len(old)
        assert cache_cost(old, new) == len(new) - len(old)
    else:
        assert len(new) - len(old) <= cache_cost(old, new) <= len(new) - len(old) + 8


def test_compaction_cost_formula_and_default_weight(tiny_dirs):
    assert compaction_cost(100, 250, 4.0) == 650.0
    assert compaction_cost(0, 0, 0.0) == 0.0
    with pytest.raises(ValueError):
        compaction_cost(-1, 0, 1.0)
    with pytest.raises(ValueError):
        compaction_cost(1, 0, -1.0)
    counter = get_counter("o200k_base")
    state = make_state(4)
    m = edit_metrics(counter, INSTRUCTIONS, TOOLS, state, state[:1] + state[3:], 12)
    assert m["compaction_cost"] == 12 * get_cache_model().output_weight + m["cache_cost"]


# --------------------------------------------------------------------------- ledger and cache models


def test_ledger_totals_equal_the_sum_of_its_turns():
    counter = TiktokenCounter("o200k_base")
    ledger = Ledger(
        CacheModel(
            block_size=16, min_cached_tokens=32, cache_read_weight=0.1, cache_write_weight=0.25, output_weight=5.0
        )
    )
    state = make_state(1)
    for i in range(1, 7):
        ids = counter.input_ids(INSTRUCTIONS, TOOLS, state)
        turn = make_turn(i)
        applied = {3: True, 5: False}.get(i)
        ledger.record(
            ids,
            counter.call_tokens(turn[0]),
            evolve_call_tokens=40 if applied is not None else 0,
            evolve_applied=applied,
        )
        state = state[:1] + state[-2:] + turn if applied else state + turn
    rows, totals = ledger.rows, ledger.totals()
    for key in ("input_tokens", "cached_tokens", "uncached_tokens", "output_tokens", "cache_write_tokens", "cost"):
        assert totals[key] == pytest.approx(sum(getattr(r, key) for r in rows)), key
    assert totals["invocations"] == 6
    assert totals["peak_context_tokens"] == max(r.input_tokens for r in rows)
    assert (totals["compactions"], totals["evolve_failures"], totals["evolve_tokens"]) == (1, 1, 80)
    assert totals["cached_share"] == pytest.approx(totals["cached_tokens"] / totals["input_tokens"])
    assert 0 < totals["cached_share"] < 1
    for r in rows:
        assert r.cached_tokens % 16 == 0 and r.cached_tokens + r.uncached_tokens == r.input_tokens
        assert r.cost == pytest.approx(
            r.uncached_tokens + 0.1 * r.cached_tokens + 5.0 * r.output_tokens + 0.25 * r.cache_write_tokens
        )
    dumped = json.loads(json.dumps([r.to_dict() for r in rows]))
    assert [d["evolve_applied"] for d in dumped] == [None, None, True, None, False, None]
    assert [d["index"] for d in dumped] == list(range(6))


def test_block_size_and_minimum_length_rounding():
    ledger = Ledger(CacheModel(block_size=128, min_cached_tokens=1024, cache_read_weight=0.1, output_weight=8.0))
    first = list(range(1000))
    r1 = ledger.record(first, 10)
    assert (r1.cached_tokens, r1.uncached_tokens, r1.reusable_prefix) == (0, 1000, 0)
    r2 = ledger.record(first + list(range(5000, 5500)), 10)  # shares 1000 < 1024 tokens
    assert r2.cached_tokens == 0 and r2.reusable_prefix == 1000
    r3 = ledger.record(first + list(range(5000, 5500)) + [7] * 100, 10)  # shares 1500 -> 11 blocks
    assert r3.cached_tokens == 1500 // 128 * 128 == 1408
    assert r3.cost == pytest.approx((1600 - 1408) + 1408 * 0.1 + 10 * 8.0)


def test_cache_writes_and_generated_tokens():
    model = CacheModel(min_cached_tokens=1024, cache_read_weight=0.1, cache_write_weight=0.25, output_weight=5.0)
    ledger = Ledger(model)
    r1 = ledger.record(list(range(2000)), 50)
    assert (r1.cached_tokens, r1.cache_write_tokens) == (0, 2000)
    r2 = ledger.record(list(range(2500)), 50)
    assert (r2.cached_tokens, r2.cache_write_tokens) == (2000, 500)
    assert r2.cost == pytest.approx(500 + 2000 * 0.1 + 50 * 5.0 + 500 * 0.25)

    vllm = Ledger(CacheModel(cache_read_weight=0.0, output_weight=1.0, cache_outputs=True))
    prompt, output = list(range(300)), list(range(1000, 1040))
    vllm.record(prompt, output)
    assert vllm.record(prompt + output + [7, 8, 9], [1]).cached_tokens == 340  # the generated tokens were cached
    counted = Ledger(CacheModel(cache_read_weight=0.0, output_weight=1.0, cache_outputs=True))
    counted.record(prompt, 40)  # only a count: the generated tokens cannot be matched
    assert counted.record(prompt + output + [7, 8, 9], [1]).cached_tokens == 300


def test_ledger_counts_the_longest_prefix_of_any_earlier_request():
    ledger = Ledger(CacheModel(cache_read_weight=0.1, output_weight=1.0))
    a = list(range(400))
    b = a[:150] + [-1] * 300  # an edit at 150: a new branch
    assert ledger.record(a, 1).cached_tokens == 0
    assert ledger.record(b, 1).cached_tokens == 150
    assert ledger.record(a + [1, 2], 1).cached_tokens == 400  # the old branch is still cached
    assert ledger.record(b + [3], 1).cached_tokens == 450
    assert ledger.record(b[:100], 1).cached_tokens == 100
    assert len(ledger._index) == 2


class _CollidingIndex(PrefixIndex):
    """Every block hashes alike: lookups must still be exact."""

    GRAIN = 4

    @staticmethod
    def _block_hash(previous: int, block: list[int]) -> int:
        return 0


@pytest.mark.parametrize("index_type", [PrefixIndex, _CollidingIndex])
def test_prefix_index_equals_brute_force(index_type):
    rng = random.Random(11)
    index, seen = index_type(), []
    for _ in range(150):
        if seen and rng.random() < 0.85:
            base = rng.choice(seen)
            seq = base[: rng.randrange(len(base) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(0, 200))]
        else:
            seq = [rng.randrange(3) for _ in range(rng.randrange(0, 300))]
        expected = max((reusable_prefix(s, seq) for s in seen), default=0)
        assert index.longest(seq) == expected
        assert index.extend(seq) == expected
        seen.append(seq)


def test_ledger_rejects_bad_records():
    ledger = Ledger(get_cache_model("openai"))
    with pytest.raises(ValueError, match="output token count"):
        ledger.record([1, 2], -1)
    with pytest.raises(ValueError, match="evolve_applied"):
        ledger.record([1, 2], 1, evolve_call_tokens=5)
    with pytest.raises(ValueError, match="evolve_call_tokens"):
        ledger.record([1, 2], 1, evolve_call_tokens=-5, evolve_applied=True)
    with pytest.raises(TypeError):
        Ledger({"block_size": 1})
    assert ledger.totals()["invocations"] == 0 and ledger.totals()["cached_share"] == 0.0


def test_context_length_terms_price_every_position_once():
    """Each uncached input token pays attention to the tokens before it, each generated token a read
    of the KV cache before it; a brute-force sum over positions gives the same cost."""
    model = CacheModel(cache_read_weight=0.0, output_weight=3.0, attention_weight=0.01, kv_read_weight=0.002)
    ledger = Ledger(model)
    first = ledger.record(list(range(100)), 20)
    assert first.cost == pytest.approx(
        100 + 20 * 3.0 + sum(0.01 * t for t in range(100)) + sum(0.002 * t for t in range(100, 120))
    )
    second = ledger.record(list(range(150)), 10)  # 100 cached: only positions 100..149 are prefilled
    assert second.cost_parts["attention"] == pytest.approx(sum(0.01 * t for t in range(100, 150)))
    assert second.cost_parts["kv_read"] == pytest.approx(sum(0.002 * t for t in range(150, 160)))
    assert second.cost == pytest.approx(sum(second.cost_parts.values()))
    totals = ledger.totals()
    assert totals["cost"] == pytest.approx(first.cost + second.cost)
    assert totals["cost_parts"]["attention"] == pytest.approx(
        first.cost_parts["attention"] + second.cost_parts["attention"]
    )


def test_local_cost_model_follows_the_shape():
    """The derivation: output weight = flops / (batch x bandwidth) for bf16; attention and KV-read
    weights scale with layers x width / params; a bigger decode batch makes output cheaper."""
    shape = ServingShape(
        params=1e9, layers=20, attention_dim=1000, kv_dim=200, flops=1e15, bandwidth=5e12, decode_batch=50
    )
    model = local_cache_model(shape)
    assert model.output_weight == pytest.approx(1e15 / (50 * 5e12))
    assert model.attention_weight == pytest.approx(2 * 20 * 1000 / 1e9)
    kv_bytes = 2 * 20 * 200 * 2
    assert model.kv_read_weight == pytest.approx(kv_bytes * 1e15 / (2 * 1e9 * 5e12))
    assert model.cache_read_weight == 0 and model.cache_outputs
    wider = local_cache_model(shape.model_copy(update={"decode_batch": 100}))
    assert (
        wider.output_weight == pytest.approx(model.output_weight / 2) and wider.kv_read_weight == model.kv_read_weight
    )


def test_local_shape_from_a_transformers_config():
    from transformers import Qwen2Config

    # Qwen2.5-0.5B's published shape: 494M parameters with tied embeddings
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    shape = ServingShape.from_hf_config(config, flops=989e12, bandwidth=4.8e12)
    assert shape.params == pytest.approx(494e6, rel=0.01)
    assert (shape.layers, shape.attention_dim, shape.kv_dim) == (24, 896, 128)
    derived, shipped = local_cache_model(shape), get_cache_model("local")  # the preset is this shape
    for weight in ("output_weight", "attention_weight", "kv_read_weight"):
        assert getattr(derived, weight) == pytest.approx(getattr(shipped, weight), rel=0.01)


def test_default_preset_is_local_and_makes_long_contexts_cost():
    """Under the default preset one more turn at a long context costs more than at a short one,
    for the same new tokens: the reason an unlimited context no longer looks cheapest."""
    model = get_cache_model()
    assert model == get_cache_model("local")

    def turn_cost(context: int) -> float:
        ledger = Ledger(model)
        ledger.record(list(range(context)), 20)
        return ledger.record(list(range(context + 200)), 20).cost

    assert turn_cost(100_000) > 10 * turn_cost(1_000)


# --------------------------------------------------------------------------- presets


def test_presets_load():
    presets = load_presets()
    assert {"vllm", "openai", "anthropic"} <= set(presets)
    openai = presets["openai"]
    assert (openai.block_size, openai.min_cached_tokens) == (128, 1024)
    assert presets["vllm"].block_size == 1 and presets["vllm"].min_cached_tokens == 0
    assert presets["anthropic"].cache_write_weight > 0
    assert default_presets_path().is_file()
    assert get_cache_model() in presets.values()


@pytest.mark.parametrize(
    "text, message",
    [
        ("default: a\npresets:\n  a: {block_size: 0, cache_read_weight: 0.1, output_weight: 4}\n", "block_size"),
        ("default: a\npresets:\n  a: {cache_read_weight: -0.1, output_weight: 4}\n", "cache_read_weight"),
        ("default: a\npresets:\n  a: {cache_read_weight: 0.1, output_weight: 4, colour: red}\n", "colour"),
        ("default: a\npresets:\n  a: {cache_read_weight: 0.1}\n", "output_weight"),
        ("default: b\npresets:\n  a: {cache_read_weight: 0.1, output_weight: 4}\n", "default preset 'b'"),
        ("presets: [1, 2]\n", "exactly the keys"),
        ("default: a\npresets: {a: [unclosed\n", "cannot read"),
    ],
)
def test_bad_presets_fail_clearly(tmp_path, text, message):
    path = tmp_path / "accounting.yaml"
    path.write_text(text)
    with pytest.raises(PresetError, match=message) as err:
        load_presets(path)
    assert str(path) in str(err.value)


def test_missing_presets_file_and_unknown_preset(tmp_path):
    with pytest.raises(PresetError, match=f"not found: {tmp_path / 'nope.yaml'}"):
        load_presets(tmp_path / "nope.yaml")
    with pytest.raises(PresetError, match="unknown cache model preset 'gemini'; choose one of local, local-7b, vllm"):
        get_cache_model("gemini")
    with pytest.raises(ValueError):
        CacheModel(cache_read_weight=float("nan"), output_weight=1.0)


# --------------------------------------------------------------------------- counters and Unicode


def test_get_counter_names(tmp_path):
    assert get_counter("cl100k_base").name == "cl100k_base"
    with pytest.raises(ValueError, match="unknown token counter 'gpt2'; choose one of: cl100k_base, o200k_base"):
        get_counter("gpt2")
    with pytest.raises(ValueError, match="local files only"):
        get_counter(f"hf:{tmp_path / 'no-such-model'}")


def test_unicode_counts_are_stable_and_round_trip(counter):
    state = validate_state(
        [
            {"type": "message", "role": "user", "content": UNICODE_TEXT},
            {
                "type": "function_call",
                "call_id": "u1",
                "name": "search",
                "arguments": json.dumps({"query": "’🙂"}, ensure_ascii=False),
            },
            {"type": "function_call_output", "call_id": "u1", "output": UNICODE_TEXT * 3},
        ]
    )
    ids = counter.input_ids(INSTRUCTIONS, TOOLS, state)
    assert ids == counter.input_ids(INSTRUCTIONS, TOOLS, json.loads(json.dumps(state)))
    assert ids == counter.input_ids_full(INSTRUCTIONS, TOOLS, state)
    if isinstance(counter, TiktokenCounter):
        assert counter.encoding.decode(ids) == "".join(estimate_pieces(INSTRUCTIONS, TOOLS, state))
        # ensure_ascii=False: characters are counted as themselves, not as \\uXXXX escapes.
        assert "\\u2019" not in "".join(estimate_pieces(INSTRUCTIONS, TOOLS, state))
    else:
        assert counter.tokenizer.decode(ids) == counter.render(INSTRUCTIONS, TOOLS, state)
    assert counter.text_tokens(UNICODE_TEXT) > 0
    assert counter.output_tokens([state[1]]) == counter.call_tokens(state[1]) > 0
    with pytest.raises(ValueError, match="function_call"):
        counter.call_tokens(state[0])


def test_tiny_tokenizer_is_deterministic_and_loadable(tmp_path, tiny_dirs):
    from transformers import AutoTokenizer

    again = tmp_path / "again"
    build_tiny_tokenizer(again, "chatml")
    assert (again / "tokenizer.json").read_text() == (tiny_dirs["chatml"] / "tokenizer.json").read_text()
    tok = AutoTokenizer.from_pretrained(str(tiny_dirs["llama3"]), local_files_only=True)
    assert 1500 <= len(tok) <= 4000 and tok.chat_template
    with pytest.raises(ValueError, match="unknown tiny template 'mistral'"):
        build_tiny_tokenizer(tmp_path / "x", "mistral")
