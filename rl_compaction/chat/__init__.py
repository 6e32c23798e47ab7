"""Between a State and a local model's text: prompts in (`render_prompt`, `prompt_ids`), tool calls out
(`parse_completion`). The accounting counts the prompt through `render_prompt`, so it sees exactly the
prompt the model sees; the policies and SFT render and parse through the same functions.

Formats (`detect_format`, from the chat template text; `formats` keeps each one's rendering and parsing
side by side):
- ``"hermes"`` (Qwen2.5, Qwen3, Hermes): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  one block per call; tool outputs in ``<tool_response>`` blocks.
- ``"fallback"``: for templates without tool support (no ``tools`` variable or no ``tool_calls``
  rendering, e.g. SmolLM2-135M-Instruct's plain ChatML), and for tool-capable templates whose call
  syntax is none of the others. The template gets no ``tools``; the tool definitions go into the system
  message as text (`fallback_tools_text`) with the instruction to answer in the hermes syntax; earlier
  calls are written into the assistant content in that form; tool outputs become user messages of
  ``<tool_response>`` blocks (consecutive outputs share one message). Completions parse as hermes.
- ``"llama3_json"`` (Llama 3.1/3.2): a JSON object ``{"name": ..., "parameters": {...}}`` starting a
  line, optionally after ``<|python_tag|>``; several calls on separate lines or split by ``;``.
- ``"mistral"``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` or the newer
  ``[TOOL_CALLS]name[ARGS]{...}``. Mistral templates demand 9-character alphanumeric call ids, so
  prompts carry a stable 9-hex-digit digest of each call_id (`mistral_call_id`).

Completions: decode generated ids with ``skip_special_tokens=False`` so markers such as
``<|python_tag|>`` survive; the text is cut at the first end-of-turn marker (`END_MARKERS`, the
tokenizer's eos). A ``<think>...</think>`` block that opens the turn (Qwen3; the opening tag may end
the prompt) is returned as `ParsedCompletion.reasoning`, not as an item. JSON strings may hold raw
newlines, and argument values survive exactly (quotes, backslashes, newlines, unicode).
"""

from rl_compaction.chat.completion import END_MARKERS, ParsedCompletion, parse_completion
from rl_compaction.chat.formats import FORMATS, detect_format, fallback_messages, fallback_tools_text, mistral_call_id
from rl_compaction.chat.prompt import prompt_ids, render_prompt

__all__ = [
    "END_MARKERS",
    "FORMATS",
    "ParsedCompletion",
    "detect_format",
    "fallback_messages",
    "fallback_tools_text",
    "mistral_call_id",
    "parse_completion",
    "prompt_ids",
    "render_prompt",
]
