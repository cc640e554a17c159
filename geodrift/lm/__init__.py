"""The language model: a Llama-style decoder, its tokenizers, the text corpora and the activations.

Used by the transformer simulator (``geodrift.sim``), the compressor (``geodrift.compress``) and the
bridge from checkpoints to models (``geodrift.pretrained``).
"""
