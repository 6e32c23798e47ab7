"""Faults of the third reliability round in what the project reads and sends: the episodes file, the demos
folder and the `vllm:` policy's server. Each raised a traceback, hung or refused good data before its fix."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from datasets import Dataset

from rl_compaction.cli import main
from rl_compaction.evaluation.evaluate import EvalConfig, make_policy, run_eval
from rl_compaction.harness.rollout import read_jsonl
from rl_compaction.harness.spec import EpisodeSpec
from rl_compaction.harness.tasks import SUBMIT_TOOL
from rl_compaction.policies.openai_http import HTTPPolicyError
from rl_compaction.policies.vllm import VLLMPolicy
from rl_compaction.training.demos import FEATURES, demo_row
from rl_compaction.training.sft import load_demos

# -- episodes.jsonl cut inside a multi-byte character --------------------------------------------------------

#: Recorded with every episode, so each line holds multi-byte characters at a place that does not vary.
NOTE = "café 🙂🙂"
EVAL = ["--policy", "oracle@none", "--env", "probe", "--scale", "0.06", "--level", "1", "--context_window", "9000"]
EVAL += ["--extra", json.dumps({"note": NOTE})]


def _eval_argv(out: Path, episodes: int) -> list[str]:
    return ["eval", *EVAL, "--episodes", str(episodes), "--output_dir", str(out)]


def test_resume_drops_a_last_line_cut_inside_a_multibyte_character(tmp_path: Path, capsys):
    out = tmp_path / "eval"
    path = out / "episodes.jsonl"
    assert main(_eval_argv(out, 2)) == 0
    complete = path.read_bytes()
    line = complete.splitlines()[0]
    cut = line.index("🙂".encode()) + 2  # half of the emoji's four bytes
    for torn in (line[:cut], line[: line.index("é".encode()) + 1]):
        path.write_bytes(complete + torn)
        assert main([*_eval_argv(out, 3), "--resume"]) == 0, capsys.readouterr().err
        records = list(read_jsonl(path))
        assert [r.task_seed for r in records] == [0, 1, 2]  # the complete records kept, the cut one run again
        assert records[0].settings["extra"] == {"note": NOTE}
        assert path.read_bytes().startswith(complete) and path.read_bytes().endswith(b"\n")
        path.write_bytes(complete)  # the next case starts from the same two records


def test_a_corrupt_line_before_the_last_is_still_refused_with_file_and_line(tmp_path: Path):
    out = tmp_path / "eval"
    path = out / "episodes.jsonl"
    episode = EpisodeSpec(family="probe", scale=0.06, level=1)
    config = EvalConfig(policies=["oracle@none"], episode=episode, episodes=2, output_dir=str(out))
    run_eval(config)
    first, second = path.read_bytes().splitlines()
    torn = second[: second.index(b'"settings"') + 3] + b"\xc3"  # a cut record, then more lines after it
    path.write_bytes(first + b"\n" + torn + b"\n" + second + b"\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} line 2 is not an episode record .*--output-dir"):
        run_eval(config, resume=True)


def test_a_write_cut_by_a_full_disk_is_one_line_and_resume_continues(tmp_path: Path, capsys):
    """The file size limit cuts the second record's write inside an emoji, as a full disk would: the run ends
    with one line naming the file (no OSError traceback), and --resume drops the torn line and goes on."""
    out = tmp_path / "eval"
    path = out / "episodes.jsonl"
    assert main(_eval_argv(out, 1)) == 0
    line = path.read_bytes()
    limit = len(line) + line.index("🙂".encode()) + 2
    script = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from rl_compaction.cli import main\n"
        f"sys.exit(main({[*_eval_argv(out, 2), '--resume']!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert f"cannot append to {path}" in result.stderr and "--resume continues" in result.stderr
    assert path.stat().st_size == limit  # the cut: the first record, then the second one's start
    capsys.readouterr()
    assert main([*_eval_argv(out, 2), "--resume"]) == 0, capsys.readouterr().err
    assert [r.task_seed for r in read_jsonl(path)] == [0, 1]
    assert path.read_bytes().startswith(line)


# -- a hand-edited demos folder ------------------------------------------------------------------------------

_CALL = {"type": "function_call", "call_id": "c1", "name": "submit", "arguments": '{"answer": "1"}'}
#: messages: 0 system, 1 user, 2 the assistant's call c1, 3 its tool output, 4 the trained turn (call c2)
_STATE = [{"type": "message", "role": "user", "content": "What is it?"}, _CALL]
_STATE += [{"type": "function_call_output", "call_id": "c1", "output": "Wrong."}]


def _demo_row() -> dict:
    observation = {"instructions": "Answer.", "tools": [SUBMIT_TOOL], "state": _STATE}
    turn = [{**_CALL, "call_id": "c2", "arguments": '{"answer": "2"}'}]
    return demo_row(observation, turn, family="probe", strategy="none", task_seed=0, turn=2)


def _set(path: str, value: object):
    """An edit of a row: the field at `path` (keys and indexes, dotted) set to `value`."""

    def edit(row: dict) -> None:
        *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        for key in parents:
            row = row[key]
        row[last] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_set("messages", []), "messages is empty"),  # IndexError in turn_kind
        (_set("messages.4.tool_calls.0.function", None), r"messages\[4\]\.tool_calls\[0\]\.function is null"),
        (_set("messages.3.tool_call_id", None), r"messages\[3\]\.tool_call_id is null"),  # KeyError
        (_set("messages.2.content", None), r"messages\[2\]\.content is null"),  # TypeError
        (
            _set("messages.4.tool_calls.0.function.arguments", "{"),
            r"messages\[4\]\.tool_calls\[0\]\.function\.arguments is not JSON",
        ),
        (_set("tools", '[{"type": "function",'), "tools is not JSON"),  # JSONDecodeError naming nothing
        (_set("messages.1.role", "robot"), "messages: cannot render"),
    ],
)
def test_a_hand_edited_demos_row_is_refused_naming_folder_row_and_field(edit, field, tmp_path: Path):
    good, bad = _demo_row(), _demo_row()
    edit(bad)
    folder = tmp_path / "demos"
    Dataset.from_list([good, bad], features=FEATURES).save_to_disk(str(folder))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(folder))}, row 1 \(from 0\): {field}"):
        load_demos(folder)
    Dataset.from_list([good, good], features=FEATURES).save_to_disk(str(tmp_path / "unedited"))
    assert len(load_demos(tmp_path / "unedited")) == 2


# -- the vllm: policy against a server that hangs, fails or answers the wrong shape ------------------------------

SERVED = "the-served-model"


def _completions_reply(ids: list[int]) -> dict:
    """What vLLM's /v1/completions answers with return_token_ids and logprobs=0 (fields this side reads)."""
    logprobs = {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": [-0.5] * len(ids), "top_logprobs": None}
    return {"choices": [{"index": 0, "text": "", "token_ids": ids, "logprobs": logprobs, "prompt_token_ids": [1]}]}


@contextmanager
def _vllm_server(answer: str, requests: list[dict]) -> Iterator[str]:
    """A stand-in for `trl vllm-serve`: /v1/models names `SERVED`; each /v1/completions request is
    recorded, then answered by `answer`: "ok" (token ids), "hang" (nothing, until the block ends), "500",
    or "shape" (a completions reply without token ids, as a server that is not vLLM's gives). Yields its URL."""
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, data: dict) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send(200, {"object": "list", "data": [{"id": SERVED, "object": "model"}]})

        def do_POST(self):
            requests.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            if answer == "hang":
                release.wait(10)
            elif answer == "500":
                self._send(500, {"error": {"message": "engine dead"}})
            elif answer == "shape":
                self._send(200, {"choices": [{"index": 0, "text": "hello", "logprobs": None}]})
            else:
                self._send(200, _completions_reply([1, 2, 3]))

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


def _observation() -> dict:
    state = [{"type": "message", "role": "user", "content": "What is it?"}]
    return {"instructions": "Answer.", "tools": [SUBMIT_TOOL], "state": state}


def _served_policy(base_url: str) -> VLLMPolicy:
    return VLLMPolicy("tiny-recall", base_url=base_url, max_new_tokens=8, timeout_s=0.5, max_retries=0)


def test_vllm_server_mode_sends_token_ids_and_reads_them_back():
    requests: list[dict] = []
    with _vllm_server("ok", requests) as url:
        policy = _served_policy(url)
        [turn] = policy.act([_observation()])
    [request] = requests
    assert request["model"] == SERVED and request["prompt"] == [turn.prompt_ids] and request["max_tokens"] == 8
    assert request["return_token_ids"] is True and request["logprobs"] == 0
    assert turn.completion_ids == [1, 2, 3] and turn.logprobs == [-0.5] * 3
    assert turn.text == policy.tokenizer.decode([1, 2, 3], skip_special_tokens=False)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("hang", r"/v1/completions \(model 'the-served-model'\) timed out after 0\.5 s \(0 retries\)"),
        ("500", r"/v1/completions \(model 'the-served-model'\) failed with HTTP 500: .*engine dead"),
        (
            "shape",
            r"/v1/completions \(model 'the-served-model'\): malformed reply \(choices\[0\]\.token_ids is missing",
        ),
    ],
    ids=["hang", "500", "shape"],
)
def test_vllm_server_mode_fails_in_one_line_within_its_deadline(answer, message):
    with _vllm_server(answer, []) as url:
        policy = _served_policy(url)
        start = time.perf_counter()
        with pytest.raises(HTTPPolicyError, match=message) as error:
            policy.act([_observation()])
        assert time.perf_counter() - start < 3
    assert "\n" not in str(error.value)


def test_eval_gives_a_vllm_server_policy_its_request_timeout_and_prints_its_error_in_one_line(tmp_path, capsys):
    config = EvalConfig(policies=["vllm:tiny-recall"], request_timeout_s=0.5, output_dir=str(tmp_path / "eval"))
    argv = ["eval", "--policy", "vllm:tiny-recall", "--env", "probe", "--scale", "0.06", "--episodes", "1"]
    with _vllm_server("shape", []) as url:
        config.base_url = url
        assert make_policy("vllm:tiny-recall", "evolve", config).timeout_s == 0.5
        assert main([*argv, "--base_url", url, "--output_dir", str(tmp_path / "eval")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rl-compaction eval: error: completions request to") and "malformed reply" in err
