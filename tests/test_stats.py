"""`EpisodeStats`: one computation of an episode set's figures, read under one set of names by the eval
table and metrics.json, GRPO's logged metrics and the oracle table (four computations, four naming schemes,
before)."""

from __future__ import annotations

from dataclasses import replace

from rl_compaction.core.reports import format_share, oracle_table
from rl_compaction.core.stats import EpisodeStats
from rl_compaction.core.summary import EpisodeSummary
from rl_compaction.evaluation.report import format_metrics, policy_metrics
from rl_compaction.harness.labels import LabelEdits
from rl_compaction.harness.oracle import OracleScriptedPolicy
from rl_compaction.harness.rollout import rollout
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.training.trainer import episode_metrics

SPEC = EpisodeSpec(family="vault", scale=0.06, level=1, context_window=3300, compaction_threshold=2150)


def _records(strategy: str, n: int = 3):
    """The oracle's episodes: with its targeted edit, or ignoring the (then unsent) requests, cut off at the window."""
    spec = SPEC if strategy != "none" else replace(SPEC, compaction_request="")
    return rollout(OracleScriptedPolicy(strategy), [LabelEdits(spec.make_env()) for _ in range(n)], list(range(n)))


def test_the_eval_row_grpo_metrics_and_the_oracle_table_read_one_computation():
    records = [*_records("evolve"), *_records("none", 2)]  # the oracle ignoring requests: cut off at the window
    summaries = [r.summary for r in records]
    stats = EpisodeStats.of(summaries)
    assert (stats.episodes, stats.success_rate, stats.ended) == (5, 0.6, {"answer": 3, "context_window": 2})
    assert stats.mean_cost_solved is not None and stats.targeted_share == 1.0  # every model edit the oracle's own
    # where it edited: at the request (threshold 2,150 of 3,300 tokens, 0.65), a page past it at most
    assert 0.65 <= stats.edit_context_share < 0.9 and stats.asked_share == 1.0
    row = policy_metrics("p", records)
    assert {k: row[k] for k in stats.to_dict()} == stats.to_dict()
    logged = episode_metrics(stats)
    assert logged["success_rate"] == stats.success_rate and logged["mean_cost"] == stats.mean_cost
    assert (logged["ended/answer"], logged["ended/context_window"]) == (0.6, 0.4)
    assert "success_ci95" not in logged and "episodes" not in logged
    assert f"{stats.success_rate:.0%} [" in oracle_table("vault", "test", 3300, {"mixed": summaries})
    assert EpisodeStats.from_dict(row) == stats  # metrics.json reads back
    edits = next(t for t in format_metrics([row]).split("\n\n") if "edit@ctx" in t.splitlines()[0])
    header, _, line = edits.splitlines()[:3]
    end = header.index("edit@ctx") + len("edit@ctx")  # the edits table's column, right-aligned
    assert line[:end].split()[-1] == format_share(stats.edit_context_share) != "-"


def test_stats_of_rows_written_before_a_figure_existed():
    """A metrics.json row from before the edit shares and the per-episode edit count reads back with them unset."""
    stats = EpisodeStats.of([r.summary for r in _records("evolve", 1)])
    old = {k: v for k, v in stats.to_dict().items() if k not in ("model_edits_per_episode", "targeted_share")}
    back = EpisodeStats.from_dict({**old, "policy": "oracle@evolve"})
    assert back.model_edits_per_episode == 0.0 and back.targeted_share is None and back.mean_cost == stats.mean_cost
    assert EpisodeStats.of([]).success_rate == 0.0 and EpisodeStats.of([]).success_ci95 == [0.0, 1.0]


def _call(name: str, arguments: str, call_id: str) -> dict:
    return {"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id}


def test_the_protocol_figures_count_malformed_turns_ignored_requests_and_wrong_answers():
    """The base model's three figures, from the env's own events: an evolve call with a read call's `{}`, a
    submit without its answer and a call whose arguments are no JSON are malformed (failing code is not); a request
    followed by anything but an evolve call is ignored; an answer is right or wrong."""
    env = SPEC.make_env()
    env.reset(seed=0)
    turns = [
        [_call("evolve", "{}", "c1")],  # the read call's arguments under the evolve name
        [_call("evolve", '{"code": "return state.nope("}', "c2")],  # failing code: an edit failure, not malformed
        [_call("submit", "{}", "c3")],
        [_call("read", "{not json", "c5")],
        [_call("submit", '{"answer": "wrong"}', "c4")],
    ]
    for items in turns:
        *_, terminated, truncated, info = env.step(items)
    assert terminated and not truncated
    stats = EpisodeStats.of([EpisodeSummary.from_info(info)])
    assert stats.malformed_turn_rate == 3 / 5 and stats.answer_accuracy == 0.0
    assert stats.ignored_request_rate is None  # no request came

    oracle = EpisodeStats.of([r.summary for r in _records("evolve", 2)])
    assert (oracle.malformed_turn_rate, oracle.ignored_request_rate, oracle.answer_accuracy) == (0.0, 0.0, 1.0)
    deaf = rollout(OracleScriptedPolicy("none"), [LabelEdits(SPEC.make_env())], [0])  # reads on past every request
    stats = EpisodeStats.of([deaf[0].summary])
    assert stats.ignored_request_rate == 1.0 and stats.answer_accuracy is None  # cut off at the window
    edits = next(
        t for t in format_metrics([policy_metrics("deaf", deaf)]).split("\n\n") if "edit@ctx" in t.splitlines()[0]
    )
    header, _, line = edits.splitlines()[:3]
    end = header.index("req ignored") + len("req ignored")  # the edits table's column, right-aligned
    assert line[:end].split()[-1] == "100%" and line.split()[-1] == "-"  # no answer: accuracy unknown
