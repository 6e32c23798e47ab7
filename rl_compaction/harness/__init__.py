"""Layer 4, the harness: tasks, the environment and the loop that plays them.

`tasks` (the plug-in contract task families implement), `env` (`CompactionEnv`: the Gymnasium env
that holds the State, applies `evolve`, asks for compaction and keeps the ledger), `strategies`
(fixed harness baselines), `policy` (the `Policy` a rollout asks for turns), `oracle` (the scripted,
context-bound oracle), `rollout` (episodes in lockstep) and `checker` (checks a task family).
"""
