"""preprocessing: text -> token ids with the model's Hugging Face tokenizer (trtspec).

Inputs QUERY [1] (string), REQUEST_OUTPUT_LEN [1], optional BAD_WORDS_DICT / STOP_WORDS_DICT [-1]
(strings), END_ID / PAD_ID [1]; outputs INPUT_ID [-1] (right-padded per batch), REQUEST_INPUT_LEN,
BAD_WORDS_IDS / STOP_WORDS_IDS [2, -1] (each word tokenized without special tokens, in upstream's
format: word_rules.word_list_format), REQUEST_OUTPUT_LEN, OUT_END_ID, OUT_PAD_ID. The names are
upstream's (tensorrtllm_backend preprocessing), the subset trtspec's models use. No chat
template is applied: the client sends the final prompt text, as with upstream.
Parameters: tokenizer_dir, add_special_tokens (default true).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from trtspec_triton_common import is_true, load_tokenizer, parameters, tensor
from word_rules import word_list_format


class TritonPythonModel:
    def initialize(self, args):
        p = parameters(args)
        self.tokenizer = load_tokenizer(p["tokenizer_dir"], padding_side="left")
        self.add_special_tokens = is_true(p.get("add_special_tokens"), True)
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        self.end_id = int(eos) if eos is not None else -1
        self.pad_id = int(pad) if pad is not None else self.end_id

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(e))))
        return responses

    def _one(self, request):
        query = tensor(request, "QUERY")
        texts = [q.decode("utf-8") if isinstance(q, bytes) else str(q) for q in query.reshape(query.shape[0], -1)[:, 0]]
        ids = [self.tokenizer.encode(t, add_special_tokens=self.add_special_tokens) for t in texts]
        if any(len(i) == 0 for i in ids):
            raise ValueError("QUERY: the prompt encodes to no tokens")
        batch = len(ids)
        end = tensor(request, "END_ID")
        pad = tensor(request, "PAD_ID")
        end_ids = end.reshape(batch, -1)[:, :1].astype(np.int32) if end is not None else np.full((batch, 1), self.end_id, np.int32)
        pad_ids = pad.reshape(batch, -1)[:, :1].astype(np.int32) if pad is not None else np.full((batch, 1), self.pad_id, np.int32)
        longest = max(len(i) for i in ids)
        padded = np.full((batch, longest), self.pad_id, np.int32)
        for b, row in enumerate(ids):
            padded[b, : len(row)] = row
        lengths = np.array([[len(i)] for i in ids], np.int32)
        out_len = tensor(request, "REQUEST_OUTPUT_LEN").reshape(batch, -1)[:, :1].astype(np.int32)
        bad, stop = (self._word_lists(tensor(request, name), batch) for name in ("BAD_WORDS_DICT", "STOP_WORDS_DICT"))
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("INPUT_ID", padded), pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
            pb_utils.Tensor("BAD_WORDS_IDS", bad), pb_utils.Tensor("STOP_WORDS_IDS", stop),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", out_len), pb_utils.Tensor("OUT_END_ID", end_ids),
            pb_utils.Tensor("OUT_PAD_ID", pad_ids)])

    def _word_lists(self, words, batch):
        """[batch, 2, N] int32 of a [batch, -1] string tensor (absent: [batch, 2, 0], as upstream's)."""
        if words is None:
            return np.zeros((batch, 2, 0), np.int32)
        items = [[self.tokenizer.encode(w.decode("utf-8") if isinstance(w, bytes) else str(w), add_special_tokens=False)
                  for w in row] for row in words.reshape(batch, -1)]
        return np.array(word_list_format(items), np.int32)
