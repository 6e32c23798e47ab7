"""`EpisodeSpec`: every setting of an episode in one typed object, declared once.

An episode is a task (family, split, difficulty) played under the harness's settings (`EnvConfig`:
window, threshold, limits, tokenizer, cost preset). Demonstrations, GRPO, eval, the env and oracle
command lines and the recipes all take one EpisodeSpec, so a setting has one name and one default
wherever it is read: the harness's settings are `EnvConfig`'s own fields (this class extends it) and
the task's are declared here, with `Difficulty`'s defaults.

A spec may also be a distribution: a field named in `DISTRIBUTED` may hold a list (one value drawn per
episode, uniformly) or a mapping ``{"low": a, "high": b}`` (uniform in [a, b]; whole numbers for an
integer field), and `family` may name several families (a list), drawn with `family_weights`. `sample(seed)`
draws one concrete spec, the same one for the same seed, so that a task seed always meets the same
settings (GRPO's group of generations, a resumed eval). Distributions are written in YAML or Python; a
command-line flag sets one value.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any

from rl_compaction.accounting import TokenCounter, get_cache_model
from rl_compaction.core.configs import help_field
from rl_compaction.harness.env import CompactionEnv, EnvConfig, HarnessStrategy
from rl_compaction.harness.tasks import SPLITS, Difficulty, family_names

#: the fields that may hold a distribution (a list, or {"low": a, "high": b}; `family` a list, drawn with weights)
DISTRIBUTED = ("scale", "level", "context_window", "compaction_threshold", "compaction_request", "max_turns")

#: EnvConfig's fields, which `env_config` hands on (the rest of a spec names the task)
_HARNESS = tuple(f.name for f in dataclasses.fields(EnvConfig))


def _is_distribution(value: Any) -> bool:
    return isinstance(value, (list, tuple, dict))


def _draw(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        low, high = value["low"], value["high"]
        return rng.randint(low, high) if isinstance(low, int) and isinstance(high, int) else rng.uniform(low, high)
    if isinstance(value, (list, tuple)):
        return rng.choice(list(value))
    return value


def _corners(name: str, value: Any) -> list[Any]:
    """The values a distribution can take at its edges (every listed value; a range's two ends), checked
    up front so that a bad one fails before the first episode rather than at the draw that meets it."""
    if isinstance(value, dict):
        if set(value) != {"low", "high"}:
            raise ValueError(f"{name}: a range is {{low: A, high: B}}, got keys {sorted(value)}")
        low, high = value["low"], value["high"]
        for end in (low, high):
            if isinstance(end, bool) or not isinstance(end, (int, float)) or not math.isfinite(end):
                raise ValueError(f"{name}: a range's ends must be finite numbers, got {value!r}")
        if low > high:
            raise ValueError(f"{name}: low must be <= high, got {value!r}")
        return [low, high]
    if not value:
        raise ValueError(f"{name}: a distribution needs at least one value")
    return list(value)


@dataclass
class EpisodeSpec(EnvConfig):
    """The task and the harness's settings of an episode, or a distribution of them (see the module).

    A `compaction_threshold` left unset is 75% of each drawn window. The split names which task seeds an
    eval plays (train, validation and test never share one); demos and GRPO choose theirs by purpose.
    """

    family: str = help_field(
        "the task family (a list in YAML draws one per episode, with family_weights)",
        default="probe",
        metadata={"aliases": ["--env"]},
    )
    family_weights: list[float] | None = help_field(
        "sampling weights of a list of families (default: uniform)", default=None
    )
    split: str = help_field(
        "the task split an eval plays (demos and GRPO play train, GRPO's own evaluation validation)",
        default="test",
        metadata={"choices": SPLITS},
    )
    scale: float = help_field("the task's difficulty scale: the volume of tool output", default=Difficulty.scale)
    level: int = help_field("the task's difficulty level (1-3)", default=Difficulty.level)

    def __post_init__(self) -> None:
        """Check every setting, each drawn field at its edges, without filling in derived values: a spec
        stays what was declared (an unset threshold follows every window it is paired with)."""
        if isinstance(self.family, tuple):
            self.family = list(self.family)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if _is_distribution(value) and f.name not in DISTRIBUTED + ("family", "family_weights"):
                raise ValueError(f"{f.name} takes one value, not a distribution (those: {', '.join(DISTRIBUTED)})")
        known = family_names()
        unknown = [f for f in self.families if f not in known]
        if not self.families or unknown:
            raise ValueError(f"unknown task families {unknown or '(none given)'}; registered: {', '.join(known)}")
        if self.family_weights is not None:
            if len(self.family_weights) != len(self.families):
                raise ValueError("family_weights needs one weight per family")
            if min(self.family_weights) < 0 or sum(self.family_weights) <= 0:
                raise ValueError(f"family_weights must be >= 0 with a positive sum, got {self.family_weights}")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        for name in DISTRIBUTED:
            value = getattr(self, name)
            for corner in _corners(name, value) if _is_distribution(value) else [value]:
                try:
                    self._concrete(**{name: corner})
                except (ValueError, TypeError) as e:
                    raise ValueError(f"{name}: {e}" if _is_distribution(value) else str(e)) from None
        get_cache_model(self.cache_preset)

    def _concrete(self, **values: Any) -> tuple[EnvConfig, Difficulty]:
        """The EnvConfig and Difficulty of this spec with `values` set and every other drawn field at its
        first value (what the up-front check builds); raises as those classes do for a bad setting."""
        picked = {}
        for name in DISTRIBUTED:
            value = values.get(name, getattr(self, name))
            picked[name] = _corners(name, value)[0] if _is_distribution(value) else value
        harness = {name: picked.get(name, getattr(self, name)) for name in _HARNESS}
        return EnvConfig(**harness), Difficulty(picked["scale"], picked["level"])

    @property
    def is_distribution(self) -> bool:
        return isinstance(self.family, list) or any(_is_distribution(getattr(self, name)) for name in DISTRIBUTED)

    def sample(self, seed: int, family: str | None = None) -> EpisodeSpec:
        """One concrete spec drawn for task seed `seed` (the same seed, the same draw); `family` fixes the
        family (GRPO's dataset row has drawn it) instead of drawing it."""
        if not self.is_distribution:
            return self if family in (None, self.family) else dataclasses.replace(self, family=family)
        rng = random.Random(f"episode-spec/{seed}")
        if family is None:
            family = rng.choices(self.families, weights=self.family_weights)[0]
        drawn = {name: _draw(getattr(self, name), rng) for name in DISTRIBUTED}
        return dataclasses.replace(self, family=family, family_weights=None, **drawn)

    @property
    def families(self) -> list[str]:
        """The families episodes are drawn from (one for a single family)."""
        return list(self.family) if isinstance(self.family, list) else [self.family]

    @property
    def difficulty(self) -> Difficulty:
        return self._concrete_only()[1]

    def env_config(self) -> EnvConfig:
        """The harness's settings of a concrete spec (derived values, such as the threshold, filled in)."""
        return self._concrete_only()[0]

    def _concrete_only(self) -> tuple[EnvConfig, Difficulty]:
        drawn = [name for name in DISTRIBUTED if _is_distribution(getattr(self, name))]
        if drawn:
            raise ValueError(f"{', '.join(drawn)} hold distributions; sample() one episode first")
        return self._concrete()

    def make_env(
        self,
        seed: int | None = None,
        *,
        strategy: HarnessStrategy | None = None,
        counter: TokenCounter | None = None,
        family: str | None = None,
    ) -> CompactionEnv:
        """A `CompactionEnv` for the episode of task seed `seed` (drawn from a distribution first; a concrete
        spec needs no seed). Reset it with the same seed to play that task."""
        if seed is None and self.is_distribution:
            raise ValueError("a distribution needs the task seed to draw the episode's settings")
        spec = self.sample(seed if seed is not None else 0, family)
        return CompactionEnv(
            spec.family,
            split=spec.split,
            difficulty=spec.difficulty,
            config=spec.env_config(),
            strategy=strategy,
            counter=counter,
        )

    def settings(self) -> dict[str, Any]:
        """The declared settings as plain data (recorded with episodes and runs)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "sandbox"}


def episode_fields() -> set[str]:
    """The names of every EpisodeSpec field (a command's `--help` lists them in their own group)."""
    return {f.name for f in dataclasses.fields(EpisodeSpec)}
