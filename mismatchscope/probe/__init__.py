"""``mismatchscope probe``: a real sampler against a real trainer forward pass.

Everything under this package may import torch, transformers or vLLM, but only
inside the functions that need them, so importing the package stays cheap.
"""
