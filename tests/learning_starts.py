"""Build the learning tests' warm starts and keep them in tests/data/learning-starts/.

Why kept rather than built inside the tests: the SFT run that makes a start ends wherever the float
arithmetic of the machine takes it. The same seeded calls built a cost start at log-odds 0.45 on the
CPU of 1-2 Dec and at 1.27 on the AVX-512 EPYC of 3 Dec (with every package at the same version: none
is newer than 28 Nov), and the 3 Dec start failed some of its conservative edits, so what GRPO learnt
from it was to avoid failures, not cost. A kept start makes the tests about GRPO, which is what they
claim; SFT has its own tests (test_sft). Each start is a few MB and ~8-16 min of SFT on 2 cores.

A kept start holds only its own files (`OWN_FILES`): its tokenizer is the tiny tokenizer that the shipped
quickstart start carries byte for byte (`keep` checks it), and `kept_start` assembles the folder a test loads.

    python tests/learning_starts.py [answer|cost|unasked ...]   # rebuild (all by default), then commit
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from rl_compaction.harness.env import USAGE_REPORT
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.models.registry import build_tiny_model
from rl_compaction.recipes.quickstart import SHIPPED_START
from rl_compaction.recipes.reproduce import WARM_START_FILES
from rl_compaction.training.demos import write_demos
from rl_compaction.training.sft import train_sft

STARTS = Path(__file__).parent / "data" / "learning-starts"
#: what a kept start holds: the model; the tokenizer files are the shipped quickstart start's
OWN_FILES = ("config.json", "generation_config.json", "model.safetensors")
TOKENIZER_FILES = tuple(name for name in WARM_START_FILES if name not in OWN_FILES)

#: vault level 1 with two filler pages (~590 tiny tokens each): the request comes after the
#: first; ignoring it, the second page crosses the window
TASK = {"family": "vault", "scale": 0.02, "level": 1, "context_window": 2700, "compaction_threshold": 2150}
#: the same two short pages in a window that also holds the conservative edit's extra page, so both
#: edits succeed (oracle, 8 validation seeds: targeted 5,692, conservative 7,322, both 100%)
COST_TASK = {**TASK, "context_window": 3300}

#: TASK without requests, with the usage report after every tool call: the agent must compact on its own
UNASKED_TASK = {**TASK, "compaction_request": "", "usage_report": USAGE_REPORT}

#: SFT settings of every start (`SFTConfig` fields)
SFT = {
    "use_cpu": True,
    "save_strategy": "no",
    "report_to": "none",
    "bf16": False,
    "activation_checkpointing": False,
    "max_length": 4096,
    "per_device_train_batch_size": 1,
    "num_train_epochs": 100,
    "seed": 0,
    "disable_tqdm": True,
}
#: the schedule that teaches a random model the protocol
PROTOCOL = {"learning_rate": 2e-3, "lr_scheduler_type": "linear", "warmup_steps": 10, "max_steps": 1000}
#: the cost start's SFT steps: 1,000 left the 3 Dec machine's start failing some of its conservative edits;
#: 2,000 (fixed before it was built, the only one tried) writes both cleanly (RESULTS.md, the cost axis)
COST_SFT_STEPS = 2000


def _half_start(work: Path, task: dict, edit: str) -> Path:
    """The protocol from 1,000 SFT steps on oracle demonstrations of `edit` (read, the edit, submit) and on
    ones that read on without editing, 1:1, then 5 small steps toward reading on: a policy that edits at
    about half of the points where the oracle does."""
    start = build_tiny_model(work / "random", hidden_size=128, layers=4)
    demos = EpisodeSpec(**task, tokenizer=str(start))
    write_demos(work / "demos", demos, 64, [edit, "ignore"], keep_failed=["ignore"])
    train_sft(work / "demos", str(start), work / "sft", balance_turns=True, **PROTOCOL, **SFT)
    # balanced SFT edits nearly everywhere; a nudge toward the ignoring demonstrations makes it edit at
    # about half of the points (5 steps at 1e-4; 10 at 2e-4 already edit almost nowhere, for requests)
    write_demos(work / "ignoring", demos, 32, ["ignore"], keep_failed=["ignore"])
    schedule = {"learning_rate": 1e-4, "lr_scheduler_type": "constant", "max_steps": 5}
    train_sft(work / "ignoring", str(work / "sft"), work / "weak", **schedule, **SFT)
    return work / "weak"


def answer_start(work: Path) -> Path:
    """A policy that answers about half of the requests with the targeted edit."""
    return _half_start(work, TASK, "evolve")


def cost_start(work: Path) -> Path:
    """A random model after SFT on demonstrations of both edits, 1:1: the targeted edit and the
    conservative one (`evolve_recent`, which also keeps the last pages read)."""
    start = build_tiny_model(work / "random", hidden_size=128, layers=4)
    write_demos(work / "demos", EpisodeSpec(**COST_TASK, tokenizer=str(start)), 64, ["evolve", "evolve_recent"])
    schedule = {**PROTOCOL, "max_steps": COST_SFT_STEPS}
    train_sft(work / "demos", str(start), work / "sft", balance_turns=True, **schedule, **SFT)
    return work / "sft"


def unasked_start(work: Path) -> Path:
    """No request comes: a policy that compacts unasked, at 75% of the window as the oracle's `evolve_own`
    does, at about half of those points, and reads on into the window at the others."""
    return _half_start(work, UNASKED_TASK, "evolve_own")


BUILDERS = {"answer": answer_start, "cost": cost_start, "unasked": unasked_start}


def keep(model_dir: Path, name: str) -> Path:
    """Copy a start's own files to STARTS/name, replacing what was there; the SFT run's card and arguments
    are left behind, and its tokenizer must be the shipped one, which `kept_start` puts back."""
    for file in TOKENIZER_FILES:
        if (model_dir / file).read_bytes() != (SHIPPED_START / file).read_bytes():
            raise RuntimeError(f"{file} of the {name} start differs from the shipped {SHIPPED_START / file}")
    target = STARTS / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for file in OWN_FILES:
        shutil.copy2(model_dir / file, target / file)
    return target


def kept_start(name: str, into: Path) -> Path:
    """The kept start `name` as a model folder in `into`: its own files and the shipped tokenizer's."""
    folder = into / f"{name}-start"
    folder.mkdir(parents=True)
    for file in OWN_FILES:
        shutil.copy2(STARTS / name / file, folder / file)
    for file in TOKENIZER_FILES:
        shutil.copy2(SHIPPED_START / file, folder / file)
    return folder


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(BUILDERS))
    if unknown:
        sys.exit(f"unknown start(s) {unknown}; choose from {sorted(BUILDERS)}")
    for name in names or list(BUILDERS):
        with tempfile.TemporaryDirectory() as work:
            print(f"building the {name} start", flush=True)
            print(f"kept: {keep(BUILDERS[name](Path(work)), name)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
