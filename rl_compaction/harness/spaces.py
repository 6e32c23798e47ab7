"""The env's observation and action spaces: JSON values checked by a predicate.

Gymnasium has no space for structured text, so `JSONSpace` checks a value with a function and samples
one example; the env checker and vector envs use them like any other space.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rl_compaction.core.state import StateError, validate_state


class JSONSpace(gym.Space):
    """A space of JSON values: `contains` runs `check`, `sample` returns `example()`."""

    def __init__(self, check: Callable[[Any], None], example: Callable[[], Any], seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self._check, self._example = check, example

    def contains(self, x: Any) -> bool:
        try:
            self._check(x)
        except (StateError, ValueError, TypeError, KeyError):
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> Any:
        return self._example()

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        """Spaces that check and sample with the same functions are the same space (vector envs compare
        their sub-envs' spaces)."""
        return isinstance(other, JSONSpace) and (self._check, self._example) == (other._check, other._example)

    def __hash__(self) -> int:
        return hash((JSONSpace, self._check, self._example))


def _check_observation(obs: Any) -> None:
    if not isinstance(obs, dict) or set(obs) != {"instructions", "tools", "state"}:
        raise ValueError("observation must be a dict with instructions, tools and state")
    if not isinstance(obs["instructions"], str) or not isinstance(obs["tools"], list):
        raise TypeError("bad instructions or tools")
    validate_state(obs["state"])


def _example_observation() -> dict[str, Any]:
    return {"instructions": "", "tools": [], "state": [{"type": "message", "role": "user", "content": "hi"}]}


def _example_action() -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "Thinking."}]


def _check_action(action: Any) -> None:
    items = action.get("items") if isinstance(action, dict) else action
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise ValueError("an action is a list of output items or a dict with 'items'")


def observation_space() -> JSONSpace:
    """``{"instructions": str, "tools": [tool definitions], "state": State}``."""
    return JSONSpace(_check_observation, _example_observation)


def action_space() -> JSONSpace:
    """One model turn: a list of output items, or a dict with ``items`` (and optionally token ids)."""
    return JSONSpace(_check_action, _example_action)
