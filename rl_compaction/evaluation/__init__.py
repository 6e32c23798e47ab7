"""Layer 7, evaluation: a checkpoint or baseline against held-out tasks.

`evaluate` plays any policy spec (a model, the oracle under a strategy, an API model) on a split and
reports success with Wilson intervals, cost and its parts, and the cheap-edit share. Beside `training`.
"""
