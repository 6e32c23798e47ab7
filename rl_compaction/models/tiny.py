"""A real, small Hugging Face tokenizer with a chat template, built offline in about a second.

Tests and benchmarks need a tokenizer that behaves like a model's (byte-level BPE, added
special tokens, a Jinja chat template with tool calls) without downloading one. This module
trains a byte-level BPE with the `tokenizers` library on built-in text, attaches one of two
chat templates and saves it with `save_pretrained`, so `AutoTokenizer.from_pretrained(path)`
loads it like any local model directory.

Templates:
- ``"chatml"``: Qwen2.5-style ChatML. Tools listed in the system turn inside ``<tools>``;
  assistant tool calls as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``; tool
  outputs as ``<tool_response>`` blocks, consecutive ones grouped in one user turn.
- ``"llama3"``: Llama-3.1-like headers (``<|start_header_id|>role<|end_header_id|>``,
  ``<|eot_id|>``), tools as JSON in the system turn, tool calls as JSON objects, tool
  outputs in an ``ipython`` turn, content trimmed.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

TEMPLATES = ("chatml", "llama3")

#: Special tokens of both templates (one vocabulary serves both), in id order after the bytes.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)
#: Added tokens that are not special (as in Qwen2.5): split out before BPE, kept by decode.
ADDED_TOKENS = ("<tool_call>", "</tool_call>")

CHATML_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n" }}
    {{- "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments " }}
    {{- "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n" }}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first)
          or (message.role == 'assistant' and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

LLAMA3_TEMPLATE = """\
{{- bos_token }}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message }}
{%- if tools %}
    {{- '\\n\\nYou have access to the following functions. To call one, reply with a JSON object ' }}
    {{- '{"name": function name, "parameters": dictionary of argument name and its value}.\\n' }}
    {%- for tool in tools %}
        {{- '\\n' + (tool | tojson(indent=4)) }}
    {%- endfor %}
{%- endif %}
{{- '<|eot_id|>' }}
{%- for message in messages %}
    {%- if message.role == 'assistant' and message.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {%- if message.content %}
            {{- (message.content | trim) + '\\n' }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- set call = tool_call.function if tool_call.function is defined else tool_call %}
            {%- if not loop.first %}
                {{- '\\n' }}
            {%- endif %}
            {{- '{"name": "' + call.name + '", "parameters": ' + (call.arguments | tojson) + '}' }}
        {%- endfor %}
        {{- '<|eot_id|>' }}
    {%- elif message.role == 'tool' %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + (message.content | trim) + '<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + (message.content | trim) }}
        {{- '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

_TEMPLATE_TEXT = {"chatml": CHATML_TEMPLATE, "llama3": LLAMA3_TEMPLATE}
_TEMPLATE_TOKENS = {
    # bos, eos (end of an assistant turn), pad
    "chatml": (None, "<|im_end|>", "<|endoftext|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>", "<|endoftext|>"),
}

_PROSE = """\
The agent keeps its working context as an editable state: an ordered list of items. Each item is a
message, a function call or the output of a function call. When the context grows too long, the
agent may call the evolve tool with JavaScript that returns a new state. The harness validates the
result, counts the tokens before and after, and reports how much of the prompt cache survives.
Facts shown once may be needed much later: exact identifiers, account numbers, dates and amounts.
A correction supersedes an earlier statement; noise should be dropped, evidence should be kept.
Search the archive for the report, open the file, read the ledger, compare the totals and submit
the answer. The user asked which invoice was paid twice, who approved it, and when it was refunded.
"""

_WORDS = """\
the of and to in is that for it as with was on be by at this are from or have an they which one you
had not but what all were when we there can your more if will about up out them then she many some
so these would other into has her two like him see time could no make than first been its who now
people my made over did down only way find use may water long little very after words called just
where most know get through back much before go good new write our used me man too any day same
right look think also around another came come work three word must because does part even place
well such here take why things help put years different away again off went old number great tell
men say small every found still between name should home big give air line set own under read last
never us left end along while might next sound below saw something thought both few those always
state context token tokens cache prefix cost model agent tool tools call output input message
messages assistant user system developer function arguments content type role name description
parameters properties required string object array number boolean null true false return const let
var if else for while function evolve filter map slice length push join split JSON parse stringify
error result value key index item items text summary reasoning status completed compaction budget
invoice account amount total date report file search open read submit answer record records ledger
customer order payment refund approved pending rejected balance transfer query response request
""".split()

_SAMPLES = [
    {"type": "message", "role": "user", "content": "Find the invoice paid twice in March 2024 and submit its id."},
    {
        "type": "function_call",
        "call_id": "call_0001",
        "name": "search",
        "arguments": json.dumps({"query": "invoice March 2024", "limit": 20}),
    },
    {
        "type": "function_call_output",
        "call_id": "call_0001",
        "output": json.dumps({"results": [{"id": "INV-20481", "amount": 1250.75, "status": "paid"}]}),
    },
    {
        "type": "function_call",
        "call_id": "call_0002",
        "name": "evolve",
        "arguments": json.dumps({"code": "return state.filter((item, i) => i < 2 || i >= state.length - 6);"}),
    },
]


def _corpus() -> list[str]:
    """Deterministic training text: prose, a word list, JSON items, JavaScript, the templates and
    every printable ASCII character, so common merges exist and no byte is ever unknown."""
    lines = _PROSE.splitlines()
    lines += [" ".join(_WORDS[i : i + 12]) for i in range(0, len(_WORDS), 12)]
    lines += [w.capitalize() for w in _WORDS]
    lines += [json.dumps(s) for s in _SAMPLES] + [json.dumps(s, indent=2) for s in _SAMPLES]
    lines += [f"{n} {n * 7 % 1000:03d} {n / 8:.2f} 2024-{n % 12 + 1:02d}-{n % 28 + 1:02d}" for n in range(200)]
    lines += CHATML_TEMPLATE.splitlines() + LLAMA3_TEMPLATE.splitlines()
    # The harness's system text, so a tiny model's prompts stay short (fast CPU training tests).
    from rl_compaction.harness.tasks import SUBMIT_TOOL
    from rl_compaction.protocol.evolve import EVOLVE_TOOL, system_suffix

    lines += system_suffix().splitlines() + [json.dumps(EVOLVE_TOOL), json.dumps(SUBMIT_TOOL)]
    lines.append(string.printable)
    return lines * 3


def build_tiny_tokenizer(path: str | Path, template: str = "chatml", vocab_size: int = 3000):
    """Train a byte-level BPE tokenizer, attach the chat template `template` ("chatml" or
    "llama3"), save it to the directory `path` and return the loaded transformers tokenizer.

    The result is deterministic for given arguments; any text round-trips (byte-level)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if template not in TEMPLATES:
        raise ValueError(f"unknown tiny template {template!r}; choose one of {', '.join(TEMPLATES)}")
    if not 300 <= vocab_size <= 50_000:
        raise ValueError(f"vocab_size must be between 300 and 50000, got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    bos, eos, pad = _TEMPLATE_TOKENS[template]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        unk_token=None,
        chat_template=_TEMPLATE_TEXT[template],
        model_max_length=1 << 20,
        clean_up_tokenization_spaces=False,
    )
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    return AutoTokenizer.from_pretrained(str(out), local_files_only=True)
