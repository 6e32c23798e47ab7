"""rl-compaction: train language-model agents to compact their own context.

The package is layered; a layer imports only the layers below it (`[tool.importlinter]` in pyproject.toml holds
CI to that). Bottom to top, following one episode's data:

1. `core`: the State (OpenAI Responses API input items), its rendering for models, the QuickJS sandbox
   and the small helpers every layer shares (reports, output folders, config fields);
2. `accounting`: token counters, cache models and presets, the ledger of each turn's cost;
3. `protocol`: the evolve tool: run an edit in the sandbox, validate it, write its receipt;
4. `harness`: the task plug-in contract, `CompactionEnv`, harness strategies, the oracle, rollouts;
5. `models`: the models the project knows (the tiny ones it builds, SmolLM2, hub snapshots);
6. `policies`: policies backed by a model (transformers, vLLM, an OpenAI-compatible server);
7. `training` (demonstrations, SFT, the GRPO trainer and its reward) beside `evaluation`;
8. `recipes`: the quickstart and the reproduction, which chain the stages;
and `cli` on top. The task families live in `rl_compaction_envs` (the repository's `envs/`), found
through the `rl_compaction.tasks` entry points.
"""
