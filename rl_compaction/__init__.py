"""rl-compaction: train language-model agents to compact their own context.

The package is layered; a layer imports only the layers below it (`[tool.importlinter]` in pyproject.toml holds
CI to that). Bottom to top, following one episode's data:

1. `core`: the State (OpenAI Responses API input items), its rendering as chat messages, the QuickJS
   sandbox, episode summaries and statistics, and the small helpers every layer shares;
2. `chat`: a local model's chat formats: prompts through its chat template, tool calls parsed back;
3. `accounting`: token counters, cache models and presets, the ledger of each turn's cost;
4. `protocol`: the evolve tool: run an edit in the sandbox, validate it, write its receipt;
5. `harness`: the task plug-in contract, `EpisodeSpec`, `CompactionEnv`, harness strategies, the oracle,
   rollouts;
6. `models`: the models the project knows (the tiny ones it builds, SmolLM2, hub snapshots);
7. `policies`: policies backed by a model (transformers, vLLM, an OpenAI-compatible server);
8. `training` (demonstrations, SFT, the GRPO trainer and its reward) beside `evaluation`;
9. `recipes`: the quickstart and the reproduction, which chain the stages;
and `cli` on top. The task families live in `rl_compaction_envs` (the repository's `envs/`), found
through the `rl_compaction.tasks` entry points.
"""
