"""Output folders, checked before any work: a folder that cannot be one fails in one line at once,
not with a traceback after the episodes or the training it was meant to hold."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

#: the lock file a run holds in its output folder (`lock_output_dir`); left there, as an empty folder's only file
LOCK_FILE = ".rl-compaction.lock"


def check_output_dir(path: str | Path) -> Path:
    """`path` as a Path if it is a folder or could be created as one; else ValueError saying why
    (it is a file, it lies inside a file, or no folder can be created in the nearest existing folder above
    it). Leaves nothing behind."""
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output folder {path} is a file")
    nearest = folder
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise ValueError(f"output folder {path} cannot be created: {nearest} is a file")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ValueError(f"output folder {path} cannot be created: {nearest} is not writable")
    # os.access says yes to root everywhere, also under /sys and /proc: create (and remove) a folder to know
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=nearest))
    except OSError as e:
        raise ValueError(f"output folder {path} cannot be created in {nearest}: {e.strerror}") from None
    return folder


#: what a finished or interrupted training run leaves in its output folder
RUN_FILES = ("config.json", "adapter_config.json", "model.safetensors", "adapter_model.safetensors")


def check_no_previous_run(path: str | Path, *, resume: str | None, overwrite: bool) -> None:
    """ValueError if `path` holds a previous training run (checkpoints or a saved model) that neither
    `resume` continues nor `overwrite` allows replacing: the Trainer would silently write over it."""
    folder = Path(path).expanduser()
    if resume or overwrite or not folder.is_dir():
        return
    found = sorted(p.name for p in folder.iterdir() if p.name.startswith("checkpoint-") or p.name in RUN_FILES)
    if found:
        shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
        raise ValueError(
            f"output folder {path} holds a previous run ({shown}); pass --resume_from_checkpoint true to continue "
            "it, --overwrite_output_dir true to replace it, or another --output_dir"
        )


@contextmanager
def lock_output_dir(path: str | Path) -> Iterator[Path]:
    """Hold `path` (created if missing) for one run: a second run on it, in this or another process, is a
    ValueError naming the holder's pid, before it writes anything. Two evals on one folder wrote every episode
    twice. The lock (`flock` on LOCK_FILE inside) goes when the run ends, also when it is killed. A folder
    created here that holds nothing else at the end (a run that failed before writing) is removed."""
    folder = Path(path).expanduser()
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise ValueError(f"{path} is in use by another run (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield folder
    finally:
        os.close(fd)  # releases the lock
        if created and [p.name for p in folder.iterdir()] == [LOCK_FILE]:
            (folder / LOCK_FILE).unlink()
            folder.rmdir()


def lock_on_main_process(path: str | Path) -> AbstractContextManager[Path]:
    """`lock_output_dir` on a launch's main process (RANK 0, or no launcher): the other processes of a
    distributed run write into the same folder under its lock, and must not take it themselves."""
    return lock_output_dir(path) if int(os.environ.get("RANK", "0")) == 0 else nullcontext(Path(path))


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `path` whole or not at all: a temp file beside it, then `os.replace`. A kill or a full disk
    during a plain write leaves the file empty, and a resume then reads a torn record of what was done."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _step(folder: Path) -> int:
    """The step of a ``checkpoint-STEP`` folder (-1 for another name)."""
    tail = folder.name.rsplit("-", 1)[-1]
    return int(tail) if folder.name.startswith("checkpoint-") and tail.isdigit() else -1


def check_checkpoint(path: str | Path) -> Path:
    """`path` if it is a complete Trainer checkpoint; else ValueError naming what is missing or cut
    off and the checkpoint before it. A kill during a save leaves a folder with a truncated
    model.safetensors or no trainer_state.json, and resuming from it failed with a SafetensorError."""
    from safetensors import SafetensorError, safe_open

    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ValueError(f"checkpoint {path} is not a folder")
    problem = None
    if not (folder / "trainer_state.json").is_file():
        problem = "it has no trainer_state.json"
    for weights in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt") as f:
                for key in f.keys():
                    f.get_slice(key)
        except (SafetensorError, OSError, ValueError) as e:
            problem = f"{weights.name} is unreadable ({str(e).splitlines()[0][:120]})"
            break
    if problem is None:
        return folder
    step = _step(folder)
    earlier = [p for p in folder.parent.glob("checkpoint-*") if _step(p) < step]
    hint = f"; resume from {max(earlier, key=_step)} instead" if earlier else ""
    raise ValueError(f"checkpoint {folder} is incomplete: {problem} (a save that was killed?){hint}")


def resolve_resume(resume: str | bool | None, output_dir: str | Path) -> str | None:
    """The checkpoint a run resumes from: None for none; True (or "true") means the last one in
    `output_dir`, as in the Trainer. It is checked to be complete (`check_checkpoint`)."""
    if resume in (None, False, "", "false", "False"):
        return None
    if resume is True or str(resume).lower() == "true":
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None
        if last is None:
            raise ValueError(f"no checkpoint in {output_dir} to resume from")
        resume = last
    return str(check_checkpoint(resume))
