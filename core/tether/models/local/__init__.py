"""Local torch models, served in this process (the embedded, ``smollm2`` and ``hf:`` backends): the backend that
micro-batches requests, its weights per policy, the sampler with its KV cache and the precision it samples in."""
