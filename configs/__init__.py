"""The repository's configs/ folder, installed as `rl_compaction_configs`: the cost presets
(accounting.yaml) and the recipes (reproduce/) the package reads with importlib.resources, and the
training, SFT, accelerate and model configs users launch with. One copy of each: what users read and
edit is what the package reads."""
