"""The dialogue task family: plan a week of meetings from a long, noisy conversation.

A simulated user states requirements over many turns, revises and withdraws some of them
and pastes long irrelevant text; team calendars and room records come from tools. The
schedule is checked against the latest requirements (see `task`; `generate` builds the
world, `grammar` the requirement language, `formats` the tool outputs, `oracle` the
context-bound solver and its targeted compaction in `evolve.js`).
"""

from rl_compaction_envs.dialogue.oracle import DialogueOracle
from rl_compaction_envs.dialogue.pools import POOLS
from rl_compaction_envs.dialogue.task import DialogueFamily, DialogueTask

__all__ = ["POOLS", "DialogueFamily", "DialogueOracle", "DialogueTask"]
