"""transformers 4.57: the release the Hugging Face side (configs, tokenizers, reference logits) is read with."""

from __future__ import annotations

TRANSFORMERS_VERSION = "4.57.6"

# Tokenizer files AutoTokenizer reads from a model directory. They travel with a checkpoint so
# later stages have a default tokenizer; TRT-LLM ignores them.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "generation_config.json",
)
