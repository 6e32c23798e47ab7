"""Rebuild the `tiny-recall` weights that ship in the package (rl_compaction/weights/tiny-recall).

    python scripts/build_tiny_recall.py [--out DIR]

The same build as `resolve_model("tiny-recall")` does into the cache where no matching shipped copy
exists: the `tiny` random model (seed 0), then 800 steps of recall pretraining on synthetic text
(`rl_compaction.models.recall`; nothing from any task), with the held-out recall accuracy at 1k and 4k tokens
written into the marker. About 8 minutes on 2 CPU cores. Run it after changing the tiny model's shape,
tokenizer or recall pretraining, then commit the folder (tests/test_recall.py checks it is current).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rl_compaction.models.registry import build_named_tiny, shipped_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=shipped_dir("tiny-recall"), help="folder to (re)write")
    args = parser.parse_args()
    folder = build_named_tiny("tiny-recall", args.out, force=True)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
