"""`rl_compaction.training.train` where process 1 cuts each episode into twice as many rows as process 0
does, as happens in real runs when episodes on different GPUs differ in edits. Launched by
tests/test_train.py with `accelerate launch --multi_gpu --num_processes 2` (gloo on CPU)."""

from __future__ import annotations

import sys

from accelerate import PartialState

import rl_compaction.training.trainer as trainer_module
from rl_compaction.training.train import main

real_build_segments = trainer_module.build_segments


def uneven_build_segments(invocations, trained=None):
    segments = real_build_segments(invocations, trained)
    return segments * 2 if PartialState().process_index == 1 else segments


trainer_module.build_segments = uneven_build_segments

if __name__ == "__main__":
    main(sys.argv[1:])
