"""The language model: a Llama-style decoder (``llama``), its tokenizers (``tokenizer``), the text
corpora and perplexity (``text``), the one activation registry (``activations``, shared with the MLP
simulator) and the one Hugging Face folder writer (``hf``).

Used by the simulators (``geodrift.sim``), the compressor (``geodrift.compress``) and the bridge
from checkpoints to models (``geodrift.pretrained``); it imports neither ``geodrift.scanner`` nor
``geodrift.sim`` (``tests/test_layering.py``).
"""
