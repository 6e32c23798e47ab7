"""The dialogue family: determinism, split hygiene, the requirement language, tools, scoring,
and the context-bound oracle (plain, under lossy compaction, and after its own evolve code
run in the QuickJS sandbox)."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from driver import run_oracle  # tests/ is on sys.path under pytest
from rl_compaction_envs.dialogue import POOLS, DialogueFamily, DialogueOracle, DialogueTask
from rl_compaction_envs.dialogue.formats import parse_calendar, parse_room, render_calendar, render_room
from rl_compaction_envs.dialogue.grammar import fmt_time, parse_events
from rl_compaction_envs.dialogue.oracle import View, read_state, solve
from rl_compaction_envs.dialogue.pools import DAYS

from rl_compaction.core.sandbox import run_evolve
from rl_compaction.core.state import State, dumps_state, validate_state
from rl_compaction.core.tiktoken_offline import get_encoding
from rl_compaction.harness.env import EnvConfig
from rl_compaction.harness.oracle import make_env, run_oracle_episode
from rl_compaction.harness.tasks import SPLITS, Difficulty, ToolError, tool_arguments

SMALL = Difficulty(scale=0.06, level=2)
FAMILY = DialogueFamily()


def make(seed: int = 0, split: str = "test", difficulty: Difficulty = SMALL) -> DialogueTask:
    return FAMILY.make(seed, split, difficulty)


def step(task: DialogueTask, state: State, item: dict) -> State:
    """Apply one oracle item the way the env does (tool output, or the user's reply)."""
    if item.get("type") == "function_call":
        out = task.call_tool(item["name"], tool_arguments(item))
        return state + [item, {"type": "function_call_output", "call_id": item["call_id"], "output": out}]
    state = state + [{"type": "message", **item}]
    reply = task.user_reply(item["content"])
    return state + [{"type": "message", "role": "user", "content": reply}] if reply is not None else state


def play_until_submit(task: DialogueTask, state: State | None = None) -> tuple[State, dict, int]:
    """Run the oracle until it submits: (State before the submit, the submit call, tool calls made)."""
    oracle, state, calls = task.oracle(), state if state is not None else task.initial_state(), 0
    for _ in range(500):
        [item] = oracle.act(state)
        if item.get("name") == "submit":
            return state, item, calls
        calls += item.get("type") == "function_call"
        state = step(task, state, item)
    raise AssertionError("oracle did not submit")


def answer_of(call: dict) -> str:
    return json.loads(call["arguments"])["answer"]


def schedule_json(entries: list[tuple[str, str, int, int, str]]) -> str:
    return json.dumps(
        {
            "schedule": [
                {"meeting": m, "day": d, "start": fmt_time(s), "minutes": n, "room": r} for m, d, s, n, r in entries
            ]
        }
    )


def planted(task: DialogueTask) -> list[tuple[str, str, int, int, str]]:
    return [(s.meeting, s.day, s.start, s.minutes, s.room) for s in task.world.planted]


def apply_oracle_evolve(state: State, n: int) -> State:
    """Run the oracle's evolve code in the sandbox, as the env would, and add a receipt."""
    code = DialogueOracle().evolve_code(state)
    call = {
        "type": "function_call",
        "call_id": f"evolve_{n}",
        "name": "evolve",
        "arguments": json.dumps({"code": code}),
    }
    result = run_evolve(state + [call], code)
    assert result.ok, result.error
    new = validate_state(result.state, pending_call_id=call["call_id"])
    assert new[-1] == call
    return new + [{"type": "function_call_output", "call_id": call["call_id"], "output": '{"applied": true}'}]


# --------------------------------------------------------------------------- generation


def test_same_seed_same_task_and_outputs() -> None:
    a, b = make(3), make(3)
    assert a.world.messages == b.world.messages
    assert a.initial_state() == b.initial_state() and a.instructions == b.instructions
    assert [a.call_tool("calendar", {"day": d}) for d in DAYS] == [b.call_tool("calendar", {"day": d}) for d in DAYS]
    room = next(iter(a.world.rooms))
    assert a.call_tool("room_info", {"room": room}) == b.call_tool("room_info", {"room": room})
    assert make(4).world.messages != a.world.messages


def test_splits_share_no_pools() -> None:
    for s1, s2 in itertools.combinations(SPLITS, 2):
        p1, p2 = POOLS[s1], POOLS[s2]
        assert not set(p1.initials) & set(p2.initials)
        for attr in (
            "meeting_kinds",
            "rooms",
            "openers",
            "revision_openers",
            "chatter",
            "noise_intros",
            "email_subjects",
            "noise_sentences",
            "event_titles",
            "room_notes",
            "teams",
        ):
            assert not set(getattr(p1, attr)) & set(getattr(p2, attr)), attr
        phrasings = [{t for ts in p.templates.values() for t in ts} for p in (p1, p2)]
        assert not phrasings[0] & phrasings[1]


def names_in(task: DialogueTask) -> set[str]:
    w = task.world
    return set(w.team) | set(w.outsiders) | set(w.rooms) | {m for m in task.requirements.meetings}


def test_splits_share_no_seeds_or_names() -> None:
    by_split = {s: [make(seed, s) for seed in range(4)] for s in SPLITS}
    for s1, s2 in itertools.combinations(SPLITS, 2):
        n1 = set().union(*(names_in(t) for t in by_split[s1]))
        n2 = set().union(*(names_in(t) for t in by_split[s2]))
        assert not n1 & n2
        assert by_split[s1][0].world.messages != by_split[s2][0].world.messages


@pytest.mark.parametrize("split", SPLITS)
def test_every_requirement_parses_back_and_noise_never_does(split: str) -> None:
    for seed, level in itertools.product(range(3), (1, 2, 3)):
        task = make(seed, split, Difficulty(scale=0.3, level=level))
        parsed = [ev for msg in task.world.messages for ev in parse_events(msg)]
        assert parsed[:-1] == task.world.events
        assert parsed[-1].kind == "done" and parse_events(task.world.messages[-1]) == (parsed[-1],)


def test_revisions_and_noise_are_present() -> None:
    task = make(1, difficulty=Difficulty(scale=0.3, level=3))
    kinds = [ev.kind for ev in task.world.events]
    revisions = {"minutes_fix", "forget_day", "add", "drop"} & set(kinds)
    repeated = [
        k
        for k in ("on_day", "lunch", "not_before")
        if kinds.count(k) > len(set(ev.meeting for ev in task.world.events if ev.kind == k))
    ]
    assert revisions or repeated
    noise = [m for m in task.world.messages if not parse_events(m)]
    assert len(noise) >= 8


def test_planted_schedule_is_valid() -> None:
    for seed, level in itertools.product(range(4), (1, 2, 3)):
        task = make(seed, "train", Difficulty(scale=0.06, level=level))
        assert task.score(schedule_json(planted(task))) == 1.0


# --------------------------------------------------------------------------- tools and user


def test_bad_tool_calls_raise_tool_error() -> None:
    task = make()
    bad = [
        ("calendar", {}),
        ("calendar", {"day": 3}),
        ("calendar", {"day": "Saturday"}),
        ("calendar", {"day": "Monday", "page": 2}),
        ("room_info", {"room": "Nowhere"}),
        ("room_info", {"room": ["x"]}),
        ("room_info", {}),
        ("weather", {"city": "Oslo"}),
    ]
    for name, args in bad:
        with pytest.raises(ToolError):
            task.call_tool(name, args)
    with pytest.raises(ToolError, match="Saturday"):
        task.call_tool("calendar", {"day": "Saturday"})
    assert {t["name"] for t in task.tools()} == {"calendar", "room_info"}


def test_user_talks_until_done_then_stops_and_restarts_with_the_episode() -> None:
    task = make()
    task.initial_state()
    replies = []
    while (r := task.user_reply("next")) is not None:
        replies.append(r)
    assert replies == task.world.messages and parse_events(replies[-1])[0].kind == "done"
    assert task.user_reply("anything else?") is None
    task.initial_state()
    assert task.user_reply("next") == replies[0]
    with pytest.raises(TypeError):
        task.user_reply(None)  # type: ignore[arg-type]


def test_tool_outputs_parse_and_carry_completeness_counts() -> None:
    task = make(2)
    day, people = parse_calendar(task.call_tool("calendar", {"day": "Wednesday"}))
    assert day == "Wednesday" and set(task.world.team) <= set(people)
    truncated = task.call_tool("calendar", {"day": "Wednesday"}).rsplit("\n- ", 1)[0]
    cut_person = (
        parse_calendar(task.call_tool("calendar", {"day": "Wednesday"}))[1].keys() - parse_calendar(truncated)[1].keys()
    )
    last = sorted(task.world.team + task.world.outsiders)[-1]
    assert cut_person <= {last}
    room = next(iter(task.world.rooms.values()))
    data = parse_room(task.call_tool("room_info", {"room": room.name}))
    assert data.capacity == room.capacity and data.features == set(room.features)
    assert parse_room("[output cleared]") is None and parse_calendar("[output cleared]") is None


# --------------------------------------------------------------------------- scoring


def test_unusable_answers_score_zero() -> None:
    task = make()
    for answer in (
        "",
        "next",
        "{}",
        "[]",
        '{"schedule": []}',
        '{"schedule": "Monday"}',
        "null",
        '{"schedule": [{"meeting": "x"}]}',
    ):
        assert task.score(answer) == 0.0


def test_partial_credit_and_random_schedules() -> None:
    task = make(5, difficulty=Difficulty(scale=0.06, level=3))
    good = planted(task)
    m, d, s, n, r = good[0]
    off_grid = task.score(schedule_json([(m, d, s, n + 15, r), *good[1:]]))
    assert 0.5 < off_grid < 1.0
    assert 0.0 < task.score(schedule_json(good[1:])) < 1.0
    assert task.score("```json\n" + schedule_json(good) + "\n```") == 1.0
    rng = random.Random(0)
    rooms = list(task.world.rooms)
    scores = []
    for _ in range(20):
        guess = [
            (m, rng.choice(DAYS), rng.randrange(9 * 60, 15 * 60, 15), rng.choice((30, 45, 60, 90)), rng.choice(rooms))
            for m, *_ in good
        ]
        scores.append(task.score(schedule_json(guess)))
    assert max(scores) < 1.0 and sum(scores) / len(scores) < 0.7


def test_superseded_requirements_cost_points() -> None:
    """Solving with the first-stated requirements (revisions ignored) loses points: the checker only
    honours the latest statements. A corrected duration is always caught."""
    stale_scores, corrected = [], 0
    for seed in range(6):
        task = make(seed, "validation", Difficulty(scale=0.06, level=3))
        full, call, _ = play_until_submit(task)
        assert task.score(answer_of(call)) == 1.0
        view = read_state(full)
        stale, seen = [], set()
        for ev in view.events:
            if ev.kind in ("minutes_fix", "forget_day", "add", "drop") or (ev.kind, ev.meeting) in seen:
                continue
            seen.add((ev.kind, ev.meeting))
            stale.append(ev)
        score = task.score(json.dumps({"schedule": solve(View(view.rooms_listed, stale, view.calendars, view.rooms))}))
        stale_scores.append(score)
        if any(ev.kind == "minutes_fix" for ev in view.events):
            assert score < 1.0
            corrected += 1
    assert corrected >= 2 and sum(stale_scores) / len(stale_scores) < 0.95


# --------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("seed", range(5))
def test_oracle_solves_test_split(seed: int) -> None:
    task = make(seed, "test", Difficulty(scale=0.06, level=1 + seed % 3))
    ep = run_oracle(task)
    assert ep.score == 1.0
    assert ep.tool_calls > len(task.world.rooms)  # calendars, rooms and the submit


def clear_old_outputs(keep: int):
    """Lossy harness compaction: every tool output but the newest `keep` becomes a placeholder."""

    def compact(state: State) -> State:
        outputs = [i for i, it in enumerate(state) if it.get("type") == "function_call_output"]
        old = set(outputs[:-keep]) if keep else set(outputs)
        return [{**it, "output": "[output cleared]"} if i in old else it for i, it in enumerate(state)]

    return compact


@pytest.mark.parametrize("seed", range(3))
def test_oracle_refetches_after_outputs_are_cleared(seed: int) -> None:
    task = make(seed, "test", Difficulty(scale=0.06, level=1 + seed))
    plain = run_oracle(task)
    task = make(seed, "test", Difficulty(scale=0.06, level=1 + seed))
    lossy = run_oracle(task, compact_every=5, compact=clear_old_outputs(keep=1))
    assert lossy.score == plain.score == 1.0
    assert lossy.tool_calls > plain.tool_calls


def drop_early_user_messages(state: State) -> State:
    """Lossy compaction that forgets the first requirement messages (keeps the task statement)."""
    users = [i for i, it in enumerate(state) if it.get("role") == "user"][1:]
    gone = set(users[:6])
    return [it for i, it in enumerate(state) if i not in gone]


def test_requirements_lost_to_compaction_stay_lost() -> None:
    scores = []
    for seed in range(3):
        task = make(seed, "test", Difficulty(scale=0.06, level=2))
        ep = run_oracle(task, compact_every=25, compact=drop_early_user_messages)
        assert ep.score is not None  # the oracle still submits its best schedule
        scores.append(ep.score)
    assert min(scores) < 1.0


def test_evolve_code_keeps_the_evidence_and_shrinks_the_state() -> None:
    enc = get_encoding("o200k_base")
    task = make(2, "test", Difficulty(scale=0.5, level=2))
    state, call, _ = play_until_submit(task)
    new = apply_oracle_evolve(state, 1)
    before, after = len(enc.encode(dumps_state(state))), len(enc.encode(dumps_state(new[:-2])))
    assert after < 0.35 * before
    # the statement and every requirement survive; the oracle submits at once, with the same answer
    assert new[0] == state[0]
    assert read_state(new).events == read_state(state).events
    [again] = task.oracle().act(new)
    assert again["name"] == "submit" and task.score(answer_of(again)) == 1.0
    assert answer_of(again) == answer_of(call)


def test_evolve_code_keeps_unknown_calls_and_drops_noise() -> None:
    task = make(0)
    state = task.initial_state()
    for _ in range(12):
        state = step(task, state, {"role": "assistant", "content": "next"})
    other = {"type": "function_call", "call_id": "x1", "name": "search", "arguments": '{"q": "a"}'}
    state += [
        other,
        {"type": "function_call_output", "call_id": "x1", "output": "whatever"},
        {"type": "message", "role": "user", "content": "[harness] Compact it now with the evolve tool."},
    ]
    new = apply_oracle_evolve(state, 7)
    assert other in new
    assert all("[harness]" not in str(it.get("content", "")) for it in new)
    assert not any(it.get("role") == "assistant" for it in new)
    assert read_state(new).events == read_state(state).events


def test_oracle_with_its_own_evolve_mid_episode_still_solves() -> None:
    for seed in range(3):
        task = make(seed, "test", Difficulty(scale=0.06, level=3))
        oracle, state = task.oracle(), task.initial_state()
        for turn in range(1, 400):
            if turn % 9 == 0:
                state = apply_oracle_evolve(state, turn)
            [item] = oracle.act(state)
            if item.get("name") == "submit":
                assert task.score(answer_of(item)) == 1.0
                break
            state = step(task, state, item)
        else:
            raise AssertionError("no submit")


def test_scale_one_produces_well_over_32k_tokens() -> None:
    enc = get_encoding("o200k_base")
    task = make(0, "test", Difficulty(scale=1.0, level=2))
    ep = run_oracle(task)
    assert ep.score == 1.0
    tool_tokens = sum(len(enc.encode(o)) for o in ep.outputs)
    user_tokens = sum(len(enc.encode(m)) for m in task.world.messages)
    assert tool_tokens > 32_000 and tool_tokens + user_tokens > 40_000


def test_above_scale_one_outputs_keep_their_size_and_the_conversation_grows() -> None:
    """So that a long episode still fits a small window one output at a time (issue 8: a context an
    eighth of the unlimited peak)."""
    enc = get_encoding("o200k_base")

    def sizes(scale: float) -> tuple[int, int, int]:
        world = make(1, "test", Difficulty(scale=scale, level=2)).world
        calendar = max(len(enc.encode(render_calendar(world, day))) for day in DAYS)
        room = max(len(enc.encode(render_room(r))) for r in world.rooms.values())
        return calendar, room, sum(len(enc.encode(m)) for m in world.messages)

    one, big = sizes(1.0), sizes(4.5)
    assert big[0] < 1.3 * one[0] and big[1] < 1.3 * one[1]  # same team and rooms, other random draws
    assert big[2] > 10 * one[2]


def env_episode(strategy: str, window: int, seed: int = 0, level: int = 2) -> dict:
    """The oracle in `CompactionEnv` at scale 0.3: "none" ignores compaction requests, "evolve" answers
    them with its own edit; the threshold leaves room for one calendar output."""
    config = EnvConfig(context_window=window, compaction_threshold=min(window, 6_000))
    env = make_env("dialogue", strategy=strategy, config=config, difficulty=Difficulty(0.3, level))
    return run_oracle_episode(env, seed, use_evolve=strategy == "evolve")


@pytest.mark.parametrize("level", [2, 3])
def test_oracle_evolve_episode_with_several_compactions_succeeds(level: int) -> None:
    """Each edit cuts an already cut State again; no requirement or calendar line the schedule needs
    is lost or fetched twice, and the peak stays far below."""
    for seed in range(2):
        plain, info = env_episode("none", 1_000_000, seed, level), env_episode("evolve", 9_000, seed, level)
        ledger = info["ledger"]
        assert info["success"], info["truncated_reason"]
        assert ledger["compactions"] >= 4 and ledger["evolve_failures"] == 0
        assert info["turns"] == plain["turns"] + ledger["compactions"]
        assert ledger["peak_context_tokens"] < plain["ledger"]["peak_context_tokens"] / 2


def test_oracle_evolve_call_is_short() -> None:
    """The edit is a demonstration for SFT and each of its tokens reads the whole context: two lines
    of code (o200k tokens per call, as the ledger counts them)."""
    calls = [row["evolve_call_tokens"] for row in env_episode("evolve", 9_000)["ledger_rows"]]
    calls = [n for n in calls if n]
    assert len(calls) >= 4 and max(calls) < 230
