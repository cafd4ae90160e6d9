"""PyTorch executor of TensorRT-LLM 1.2 checkpoints, with the decoding loop the engines run.

    rope.py, kv_cache.py, model.py   the Llama-family decoder over a ragged, per-row KV cache
    device.py, placement.py          where it computes: a device (or layers placed over several), the dtype
    weights.py                       checkpoint tensors -> compute-dtype weights
    quant.py                         quantized linears and KV cache (FP8, INT8-SQ, weight-only, AWQ)
    eagle_net.py                     the EAGLE-1 drafter (eagle_nets.{d})
    tree.py                          eagle_choices validation, tree masks; a chain is a tree
    decode.py                        THE decoding loop, a step iterator: prefill, then
                                     (propose -> target forward -> accept -> commit/emit -> update)*
    speculative.py                   what the loop passes around: Proposal, Acceptance, accept rules
    draft_target.py, eagle.py, eagle2.py   the proposers (no proposer = plain greedy, greedy.py)
    stats.py, batch.py               per-request metrics (AL, per-position acceptance) and stops
    generate.py                      high-level API: load_models, generate_batch, stream_request, run_generate
    command.py                       the runtime flags (--device, --dtype, ...) of every command running it
"""
