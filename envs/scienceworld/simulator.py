"""One ScienceWorld simulator process (a JVM driven through py4j), shared by the tasks of one family.

Why one process per family instance: `CompactionEnv` builds its own family instance, so this is
one process per env, started on first use and reused across `reset`s (starting a JVM costs about
a second, loading a task a fraction of that) except where a task's world must be built fresh: a task
is first loaded in a process that has loaded no other task, since ScienceWorld carries state from one
load to the next (see `_load`). `close` ends it; a closed simulator starts again if it is used again.

Several tasks may share the process (the contract checker keeps a few alive at once). The world
is seeded by its variation, so a task's world is rebuilt by loading it again and replaying every
call it made, in order (the free look and inventory too); the simulator does that whenever another
task used the process in between, and after a failure. ScienceWorld is not exactly deterministic:
the order in which it goes through objects can change between runs, so a room may list the same
objects in another order (every observation is therefore `canonical`: its listings sorted) and,
rarely, a temperature comes out a degree apart. A replay is checked against the recorded outputs
line by line in any order, and a real difference is an error.

Every failure of the simulator (a Java exception, a dead process, a diverging replay) is raised
as `SimulatorError`, which the task turns into a tool error for the agent.
"""

from __future__ import annotations

import itertools
import subprocess
from dataclasses import dataclass, field
from typing import Any

from rl_compaction.core.state import clip

#: the first move of every episode, as ScienceWorld's own `reset` makes it
FIRST_ACTION = "look around"

#: gold paths by (task name, variation, simplifications). The simulator's gold agent may pick among
#: equal containers differently on two runs; one path per task and process keeps the oracle deterministic.
_GOLD_PATHS: dict[tuple[str, int, str], tuple[str, ...]] = {}

_TASK_IDS = itertools.count(1)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip("\t"))


def _sorted_listing(lines: list[str]) -> list[str]:
    """`lines` with every run of equally tab-indented lines sorted, each with the more deeply
    indented lines under it (sorted the same way) kept beneath it."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        depth = _indent(lines[i])
        if depth == 0 or not lines[i].strip():
            out.append(lines[i])
            i += 1
            continue
        units: list[list[str]] = []
        while i < len(lines) and _indent(lines[i]) == depth and lines[i].strip():
            j = i + 1
            while j < len(lines) and _indent(lines[j]) > depth:
                j += 1
            units.append([lines[i], *_sorted_listing(lines[i + 1 : j])])
            i = j
        out.extend(line for unit in sorted(units) for line in unit)
    return out


def canonical(observation: str) -> str:
    """An observation with its object listings in a fixed order. ScienceWorld lists a room's objects
    in an order that changes between loads of the same world (6 orders in 20 loads of one opening),
    so the same seed gave different observations; sorted, the same world reads the same."""
    return "\n".join(_sorted_listing(observation.split("\n")))


def _already_closed() -> None:
    """Stands in for a closed ScienceWorldEnv's `close` (see `Simulator.close`)."""


class SimulatorError(Exception):
    """The ScienceWorld simulator failed; the message says how (it goes to the agent as a tool error)."""


@dataclass(frozen=True)
class Outcome:
    """What one action did: the observation text and ScienceWorld's score (-100..100) and end flag after it."""

    observation: str
    score: int
    completed: bool


@dataclass
class Episode:
    """A task's world as the simulator must rebuild it: which task, and every call made in it with its output."""

    task_name: str
    variation: int
    simplifications: str = ""
    #: (call, action, output), call being "step", "look" or "inventory"
    log: list[tuple[str, str, str]] = field(default_factory=list)
    opening: str = ""  # observation of the first move, set by the first load
    uid: int = field(default_factory=lambda: next(_TASK_IDS))

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.task_name, self.variation, self.simplifications)

    @property
    def moves(self) -> int:
        """Actions taken so far (free looks and inventories not counted)."""
        return sum(call == "step" for call, _, _ in self.log)


class Simulator:
    """A lazily started ScienceWorld process; every method that reads or changes a task's world loads it first."""

    def __init__(self) -> None:
        self._env: Any = None  # scienceworld.ScienceWorldEnv
        self._loaded: int | None = None  # uid of the episode whose world the process holds
        self._built: set[tuple[str, int, str]] = set()  # the task keys the process has loaded

    @property
    def process(self) -> subprocess.Popen | None:
        """The Java process, while one runs (tests check that `close` ends it)."""
        return None if self._env is None else self._env._gateway.java_process

    def start(self) -> None:
        """Start the Java process unless one runs; a missing extra or Java is a SimulatorError saying so."""
        if self._env is not None:
            return
        try:
            from scienceworld import ScienceWorldEnv
        except ImportError as e:
            raise SimulatorError(
                "the scienceworld family needs the optional extra: pip install 'rl-compaction[scienceworld]'"
            ) from e
        try:
            self._env = ScienceWorldEnv("")
        except Exception as e:  # py4j and subprocess report a missing or broken Java in several ways
            raise SimulatorError(f"could not start the ScienceWorld simulator (Java 8+ must be on PATH): {e}") from e

    def close(self) -> None:
        """End the Java process (and wait for it); safe to call twice."""
        env, self._env, self._loaded = self._env, None, None
        self._built.clear()
        if env is None:
            return
        proc = env._gateway.java_process
        if proc.poll() is None:
            try:
                env.close()
            except Exception:  # the process died meanwhile: nothing left to shut down politely
                pass
        else:  # a dead JVM cannot be asked to shut down: release the Python side only
            env._gateway.shutdown_callback_server()
            client = env._gateway._gateway_client
            client.close()
            client.is_connected = False  # what a polite shutdown sets: py4j's finalizers then stop calling Java
        # Whenever the garbage collector later gets to the env and its Java proxies, in whatever thread runs
        # then, ScienceWorldEnv.__del__ closes again and py4j's finalizers tell Java to free each proxy. Against
        # a gone JVM every such call logs a connection traceback, and two threads formatting tracebacks at
        # once crash CPython 3.11's ast module (a SystemError that failed a test in CI). Neither may reach Java.
        env.close = _already_closed
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ------------------------------------------------------------------ the episode's world

    def opening(self, episode: Episode) -> tuple[str, str]:
        """(task description, observation of the first move) of `episode`'s world."""
        self._ensure(episode)
        return self._call(self._env.server.freeActionTaskDesc), episode.opening

    def variations(self, task_name: str, split: str) -> tuple[int, ...]:
        """ScienceWorld's own variation indices of `task_name` in its split "Train", "Dev" or "Test"."""
        self.start()
        self._loaded = None  # the split lists are read from a loaded task
        self._built.add((task_name, 0, ""))
        error = self._call(self._env.server.load, task_name, 0, "", False)
        if error:
            raise SimulatorError(f"ScienceWorld could not load {task_name!r}: {clip(error, 300)}")
        return tuple(int(v) for v in self._call(getattr(self._env.server, f"getVariations{split}")))

    def gold_path(self, episode: Episode) -> tuple[str, ...]:
        """The simulator's gold action sequence for the episode's task (generated once per process)."""
        if episode.key not in _GOLD_PATHS:
            self._load(episode, gold=True)
            _GOLD_PATHS[episode.key] = tuple(self._call(self._env.server.getGoldActionSequence))
        return _GOLD_PATHS[episode.key]

    def step(self, episode: Episode, action: str) -> Outcome:
        """Take one action in the episode's world and record it for replays."""
        self._ensure(episode)
        outcome = self._step(action)
        episode.log.append(("step", action, outcome.observation))
        return outcome

    def look(self, episode: Episode) -> str:
        """The room the agent is in (no time passes; recorded for replays, see the module docstring)."""
        self._ensure(episode)
        return self._free(episode, "look")

    def inventory(self, episode: Episode) -> str:
        """What the agent carries (no time passes; recorded for replays)."""
        self._ensure(episode)
        return self._free(episode, "inventory")

    def task_description(self, episode: Episode) -> str:
        self._ensure(episode)
        return self._call(self._env.server.freeActionTaskDesc)

    # ------------------------------------------------------------------ internals

    def _ensure(self, episode: Episode) -> None:
        if self._env is None or self._loaded != episode.uid:
            self._load(episode, gold=False)

    def _load(self, episode: Episode, gold: bool) -> None:
        """Load the episode's task (optionally generating the gold path), take the first move and
        replay its calls, checking that each gives the output recorded.

        A task's first load (its gold path, or its opening) happens in a process that has built no other
        task's world, restarting it if need be: ScienceWorld keeps state across loads, so boil variation
        22 heated its tin more slowly after a find-animal task in the same process, and the gold path's
        "examine liquid tin" came before the tin had melted (score 78 instead of 100, in sessions)."""
        if self._env is not None and self._built - {episode.key} and (gold or not episode.log):
            self.close()
        self.start()
        self._loaded = None
        self._built.add(episode.key)
        error = self._call(self._env.server.load, episode.task_name, episode.variation, episode.simplifications, gold)
        if error:
            raise SimulatorError(f"ScienceWorld could not load {episode.task_name!r}: {clip(error, 300)}")
        episode.opening = self._step(FIRST_ACTION).observation
        for call, action, output in episode.log:
            again = self._step(action).observation if call == "step" else self._free_call(call)
            if sorted(again.splitlines()) != sorted(output.splitlines()):
                raise SimulatorError(f"replaying the episode diverged at {call} {action!r}; cannot rebuild the world")
        self._loaded = episode.uid

    def _free(self, episode: Episode, call: str) -> str:
        output = self._free_call(call)
        episode.log.append((call, "", output))
        return output

    def _free_call(self, call: str) -> str:
        server = self._env.server
        return canonical(self._call({"look": server.freeActionLook, "inventory": server.freeActionInventory}[call]))

    def _step(self, action: str) -> Outcome:
        server = self._env.server
        observation = canonical(self._call(server.step, action))
        return Outcome(observation, round(100 * self._call(server.getScore)), bool(self._call(server.getCompleted)))

    def _call(self, fn: Any, *args: Any) -> Any:
        """Call the Java side; any failure becomes SimulatorError, and a dead process is closed so
        that the next call starts a fresh one (which replays the episode)."""
        from py4j.protocol import Py4JError, Py4JJavaError

        try:
            return fn(*args)
        except Py4JJavaError as e:
            self._loaded = None  # the world may be half-changed: rebuild it on the next call
            raise SimulatorError(f"the simulator raised {clip(str(e.java_exception), 300)}") from e
        except (Py4JError, OSError) as e:
            self.close()
            raise SimulatorError(f"the simulator stopped ({clip(str(e), 200)}); the next call restarts it") from e
