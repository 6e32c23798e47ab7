"""Layer 5, models: the models the project knows and how they load, offline.

`registry` (names -> local folders, loading, the shipped weights), `tiny` (tiny random models and
their tokenizer, built on first use) and `recall` (the recall pretraining that `tiny-recall` ships with).
"""
