"""Rebuild the quickstart's warm start that ships in the package (rl_compaction/weights/quickstart-sft).

    python scripts/build_quickstart_start.py [--out DIR]

Runs stages 1-2 of configs/reproduce/quickstart.yaml exactly as `rl-compaction reproduce` would (oracle
demonstrations of train tasks only, then SFT of `tiny-recall`) and keeps the SFT checkpoint's model and
tokenizer with a marker of the settings. About 11 minutes on 2 idle CPU cores. Run it after changing the
recipe's demo or SFT settings, then commit the folder (tests/test_quickstart.py checks it is current).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rl_compaction.recipes.quickstart import QUICKSTART_CONFIG, SHIPPED_START
from rl_compaction.recipes.recipe import ReproduceConfig
from rl_compaction.recipes.reproduce import build_warm_start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SHIPPED_START, help="folder to (re)write")
    args = parser.parse_args()
    folder = build_warm_start(ReproduceConfig.from_yaml(QUICKSTART_CONFIG), args.out)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
