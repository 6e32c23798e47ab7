"""Layer 3, the evolve protocol: the seed's mechanism.

`evolve` runs an agent's JavaScript edit of its State in the sandbox, validates the result and
writes its receipt (tokens, reusable prefix, Cache Cost, Compaction Cost, from `accounting`);
`example_runner` runs the worked examples in `examples/`.
"""
