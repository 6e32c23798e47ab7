"""Layer 1, core: the State and what everything above shares.

`state` (the schema and validation of a State), `render` (a State and its tools as chat messages),
`sandbox` (QuickJS in a worker process, under limits), `tiktoken_offline` (encodings from a package,
never the network), `summary` and `stats` (an episode's typed summary, and `EpisodeStats` over many),
and helpers with no project dependency: `reports` (tables, progress), `outputs` (output
folders and checkpoints), `configs` (documented config fields), `wandb_settings` (when W&B logs).
Imports nothing else from the package.
"""
