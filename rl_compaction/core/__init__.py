"""Layer 1, core: the State and what everything above shares.

`state` (the schema and validation of a State), `render` (a State and its tools as a model sees
them), `chat_format` (a local model's prompt ids through its chat template), `sandbox` (QuickJS in a
worker process, under limits), `tiktoken_offline` (encodings from a package, never the network),
and helpers with no project dependency: `reports` (intervals, tables, progress), `outputs` (output
folders and checkpoints), `configs` (documented config fields). Imports nothing else from the package.
"""
