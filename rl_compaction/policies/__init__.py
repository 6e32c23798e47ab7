"""Layer 6, policies: a `rl_compaction.harness.policy.Policy` backed by a model.

`local` (transformers, incremental prefix reuse), `vllm` (a vLLM engine or server) and
`openai_http` (any OpenAI-compatible endpoint, chat or responses); `prompts` builds the local
backends' (and GRPO's) prompt ids token in, token out, so training rows are cut only at edits.
"""
