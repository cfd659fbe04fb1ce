"""Execution provenance: what each side of a run actually ran, recorded with the run and compared before any number.

One module a concept:

* :mod:`.record`: the typed record a manifest holds under ``provenance``, and its schema;
* :mod:`.digests`: the identities read from a checkpoint folder (weights per file and combined, tokenizer,
  chat template, generation config);
* :mod:`.environment`: the engines' and torch's environment variables, never a credential or a path;
* :mod:`.logs`: the fallbacks an engine's log announces;
* :mod:`.torch_side`, :mod:`.vllm_side`: a side read off a live torch model or ``vllm.LLM`` (nothing imported);
* :mod:`.collect`: ``mismatchscope.provenance(...)``, both sides in one call, for the Recorder;
* :mod:`.derived`: what a manifest written before provenance, or an import, implies;
* :mod:`.read`: a run's record as every command reads it (never an error);
* :mod:`.compare`: two sides or two runs field by field, changed first;
* :mod:`.contract`: are the two sides one program, and what ran otherwise than asked (``doctor``, ``certify``).

The package is named for what it records; ``mismatchscope.provenance`` is the function that collects it.
Nothing is imported here, so a module that needs one piece (the probe's checks need :mod:`.digests`) loads
only that piece.
"""
