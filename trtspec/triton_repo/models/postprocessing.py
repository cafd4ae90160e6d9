"""postprocessing: token ids -> text with the model's Hugging Face tokenizer (trtspec).

Inputs TOKENS_BATCH [-1, -1] ([batch, beams, tokens]) and SEQUENCE_LENGTH [-1] ([batch, beams]);
output OUTPUT [-1] ([batch, beams] strings). Upstream's names. `generate` sends all tokens
generated so far and streams the difference between successive texts, so that multi-token
characters and leading spaces come out right (upstream's `accumulate_tokens` idea).
Parameters: tokenizer_dir, skip_special_tokens (default true).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from trtspec_triton_common import is_true, load_tokenizer, parameters, tensor


class TritonPythonModel:
    def initialize(self, args):
        p = parameters(args)
        self.tokenizer = load_tokenizer(p["tokenizer_dir"])
        self.skip_special_tokens = is_true(p.get("skip_special_tokens"), True)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                tokens = tensor(request, "TOKENS_BATCH")
                lengths = tensor(request, "SEQUENCE_LENGTH")
                if tokens.ndim == 2:  # [batch, tokens]: one beam
                    tokens = tokens[:, None, :]
                lengths = lengths.reshape(tokens.shape[0], -1)
                texts = np.empty((tokens.shape[0], tokens.shape[1]), dtype=object)
                for b in range(tokens.shape[0]):
                    for k in range(tokens.shape[1]):
                        ids = tokens[b, k, : int(lengths[b, k])].tolist()
                        texts[b, k] = self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens).encode("utf-8")
                responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", texts)]))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(e))))
        return responses
