"""Samples -> prompt text and token ids, the way the served model will see them.

With `chat=True` and a tokenizer that has a chat template, the conversation goes through
`apply_chat_template(messages, add_generation_prompt=True)`: an instruct model's acceptance and
activation statistics are only representative on the format it was trained on.

Without a chat template (a base model), or with `chat=False`, the plain format is used:
- a single user message is its content, unchanged (the completion-style prompt a base model
  expects; for HumanEval that is the instruction line followed by the code stub);
- any other conversation is one block per message, "Role: content", separated by a blank line,
  ending with "Assistant:" so the model continues as the assistant:

      System: You are terse.

      User: Hi

      Assistant:

Tool use (an assistant's `tool_calls`, the request's `tools`; workloads/files.py) is rendered only by
a chat template that renders it: its source must name `tool_calls` (and `tools`, when the sample has
definitions). Otherwise, and in the plain format, such a sample is refused: the tool calls would
vanish or print as text, and the prompt would not be the one the server sees. Filter such records
out of a log (JQ_FILTER) to profile the rest.

Plain text is tokenized with the tokenizer's special tokens (a BOS when it adds one); template text
already contains whatever special tokens the template writes, so nothing is added to it. A server
that encodes the text it is sent with the special tokens (the repository's preprocessing,
add_special_tokens true as upstream's) would add a second BOS to template text that starts with
one (Llama-2/3, Mistral): `served_text` is the text to send so that it encodes to `render`'s ids.
"""

from __future__ import annotations

from typing import Literal

from ..errors import TrtspecError
from .sample import Sample

Keep = Literal["start", "end"]
JQ_FILTER = "jq -c 'select((.tools // []) == [] and all(.messages[]?; (.tool_calls // []) == []))' log.jsonl"


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def plain_text(messages: list[dict]) -> str:
    """The documented no-template format (see the module docstring)."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    blocks = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(blocks + ["Assistant:"])


def _check_tokenizer(sample: Sample, tokenizer) -> None:
    if tokenizer is None:
        raise TrtspecError(f"sample {sample.id}: rendering needs a tokenizer (the checkpoint has none)")


def tool_use(sample: Sample) -> list[str]:
    """What a template must render for this sample: 'tool_calls' and/or 'tools' (empty: none)."""
    calls = ["tool_calls"] if any(m.get("tool_calls") for m in sample.messages) else []
    return calls + (["tools"] if sample.tools else [])


def _check_tool_use(sample: Sample, tokenizer, chat: bool) -> None:
    """Refuse tool use that the rendering would lose (module docstring)."""
    needed = tool_use(sample)
    if not needed:
        return
    template = str(tokenizer.chat_template) if chat and has_chat_template(tokenizer) else ""
    missing = [k for k in needed if k not in template]
    if missing:
        why = (f"the tokenizer's chat template never mentions {' or '.join(missing)}" if template else
               "the plain format (no chat template, or chat off) has no form for it")
        raise TrtspecError(f"sample {sample.id}: its tool use ({', '.join(needed)}) cannot be rendered as the server "
                           f"would see it: {why}; filter tool-use records out of the log ({JQ_FILTER}) or use a "
                           "tokenizer whose chat template supports tools")


def _template(sample: Sample, tokenizer, tokenize: bool):
    try:
        return tokenizer.apply_chat_template(sample.messages, tools=sample.tools, add_generation_prompt=True,
                                             tokenize=tokenize)
    except Exception as e:  # jinja raises e.g. "System role not supported" from inside the template
        raise TrtspecError(f"sample {sample.id}: the tokenizer's chat template failed "
                           f"({type(e).__name__}: {e})") from None


def render_text(sample: Sample, tokenizer, chat: bool = True) -> str:
    """The prompt string: chat template text, or the plain format without one / with chat=False."""
    if chat:
        _check_tokenizer(sample, tokenizer)
    _check_tool_use(sample, tokenizer, chat)
    if chat:
        if has_chat_template(tokenizer):
            return _template(sample, tokenizer, tokenize=False)
    return plain_text(sample.messages)


def served_text(sample: Sample, tokenizer, chat: bool = True) -> str:
    """`render_text` for a server that encodes it with the special tokens: a leading BOS the template
    wrote is dropped when the tokenizer adds one itself, so the server's ids are `render`'s, not those
    with two BOS (which no model was trained on, and whose acceptance the profile never measured)."""
    text = render_text(sample, tokenizer, chat)
    bos = getattr(tokenizer, "bos_token", None)  # no tokenizer: the plain format, sent as it is
    if bos and text.startswith(bos) and _adds_bos(tokenizer):
        return text[len(bos):]
    return text


def _adds_bos(tokenizer) -> bool:
    ids = tokenizer("x")["input_ids"]
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def render(sample: Sample, tokenizer, chat: bool = True, max_prompt_tokens: int | None = None,
           keep: Keep = "start") -> list[int]:
    """Prompt token ids, optionally cut to `max_prompt_tokens`.

    keep="start" (default) keeps the first tokens: for calibration the prompt only has to be
    representative text, and the start keeps BOS and the system/role header the model always
    sees. keep="end" keeps the last tokens, so a generation prompt still ends with the assistant
    header (use it when the truncated prompt is decoded from)."""
    _check_tokenizer(sample, tokenizer)
    if max_prompt_tokens is not None and (isinstance(max_prompt_tokens, bool) or max_prompt_tokens <= 0):
        raise TrtspecError(f"max_prompt_tokens must be a positive integer, got {max_prompt_tokens!r}")
    if keep not in ("start", "end"):
        raise TrtspecError(f"keep must be 'start' or 'end', got {keep!r}")
    _check_tool_use(sample, tokenizer, chat)
    if chat and has_chat_template(tokenizer):
        ids = _template(sample, tokenizer, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(plain_text(sample.messages))["input_ids"]
    ids = [int(i) for i in ids]
    if max_prompt_tokens is not None and len(ids) > max_prompt_tokens:
        ids = ids[:max_prompt_tokens] if keep == "start" else ids[-max_prompt_tokens:]
    return ids
