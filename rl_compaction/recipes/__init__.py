"""Layer 8, recipes: the stages chained into one run.

`reproduce` (demonstrations -> SFT -> GRPO -> held-out eval, from a YAML recipe) and `quickstart`
(the main job: the shortest recipe, from the shipped warm start).
"""
