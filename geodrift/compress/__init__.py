"""Compression guided (or not) by geometric continuity: layer pruning and shared bases.

- ``model``: one loaded Llama, its tokenizer, disjoint calibration/evaluation windows, forwards
  that skip layers by index;
- ``rank``: layer rankings (two data-free geometry scores, Block Influence, angular distance,
  random, SLEB-style greedy);
- ``prune``: the ``compress prune`` experiment; ``share`` / ``share_run``: shared bases in input or
  output space and the ``compress share`` experiment; ``save``: the Hugging Face folder writer.
"""
