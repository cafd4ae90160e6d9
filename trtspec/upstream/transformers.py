"""transformers 4.57: the release the Hugging Face side (configs, tokenizers, reference logits) is read with."""

from __future__ import annotations

TRANSFORMERS_VERSION = "4.57.6"

# What a family's config.json may leave out, and the value its transformers config class then
# takes (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config __init__; checked by reading the same
# files with transformers, tests/checkpoints/test_config_validation.py). num_key_value_heads None:
# num_attention_heads (also what an explicit null gives in every family); head_dim None:
# hidden_size // num_attention_heads.
HF_CONFIG_DEFAULTS = {
    "llama": {"num_key_value_heads": None, "head_dim": None, "rope_theta": 10000.0,
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-6},
    "mistral": {"num_key_value_heads": 8, "head_dim": None, "rope_theta": 10000.0,
                "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "sliding_window": 4096},
    "qwen2": {"num_key_value_heads": 32, "head_dim": None, "rope_theta": 10000.0,
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "max_window_layers": 28},
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "rope_theta": 10000.0,
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "max_window_layers": 28},
}
# Qwen2/Qwen3 with use_sliding_window: layer i slides when sliding_window is set and i >= max_window_layers
# (their config classes' layer_types), so a max_window_layers >= num_hidden_layers slides no layer.

# rope_scaling's rope_type for plain, unscaled RoPE (modeling_rope_utils ROPE_INIT_FUNCTIONS).
HF_UNSCALED_ROPE_TYPE = "default"

# Tokenizer files AutoTokenizer reads from a model directory. They travel with a checkpoint so
# later stages have a default tokenizer; TRT-LLM ignores them.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "generation_config.json",
)
