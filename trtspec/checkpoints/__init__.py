"""HF and TensorRT-LLM checkpoint formats: reading, name maps per family, TP sharding, EAGLE merge,
draft-target pairs, validation. The public entry points are re-exported here."""
