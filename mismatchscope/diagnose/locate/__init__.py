"""``--locate``: where in the forward pass the sampler and the trainer part.

Both sides (and the float64 reference) run the same token ids by prefill; at
every capture point of the forward pass (:mod:`.points`) the activations of a
bounded sample of token positions are kept, and :mod:`.compare` turns them
into per-point differences (sampler vs trainer, each side vs the reference),
their growth from point to point, and a verdict: the first point where the
sides part by more than the reference's own agreement with either side.

The transformers side is captured through module hooks (:mod:`.hf_capture`),
the vLLM side inside the real engine (:mod:`.vllm_capture`); :mod:`.run`
ties them to ``diagnose`` and ``rescore``.
"""
