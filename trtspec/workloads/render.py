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

Plain text is tokenized with the tokenizer's special tokens (a BOS when it adds one); template text
already contains whatever special tokens the template writes, so nothing is added to it.
"""

from __future__ import annotations

from typing import Literal

from ..errors import TrtspecError
from .sample import Sample

Keep = Literal["start", "end"]


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


def _template(sample: Sample, tokenizer, tokenize: bool):
    try:
        return tokenizer.apply_chat_template(sample.messages, add_generation_prompt=True, tokenize=tokenize)
    except Exception as e:  # jinja raises e.g. "System role not supported" from inside the template
        raise TrtspecError(f"sample {sample.id}: the tokenizer's chat template failed "
                           f"({type(e).__name__}: {e})") from None


def render_text(sample: Sample, tokenizer, chat: bool = True) -> str:
    """The prompt string: chat template text, or the plain format without one / with chat=False."""
    if chat:
        _check_tokenizer(sample, tokenizer)
        if has_chat_template(tokenizer):
            return _template(sample, tokenizer, tokenize=False)
    return plain_text(sample.messages)


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
    if chat and has_chat_template(tokenizer):
        ids = _template(sample, tokenizer, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(plain_text(sample.messages))["input_ids"]
    ids = [int(i) for i in ids]
    if max_prompt_tokens is not None and len(ids) > max_prompt_tokens:
        ids = ids[:max_prompt_tokens] if keep == "start" else ids[-max_prompt_tokens:]
    return ids
