"""Compression guided (or not) by geometric continuity: layer pruning, and calibration-whitened low rank.

- ``model``: one loaded Llama, its tokenizer, calibration/evaluation windows, forwards that skip
  layers by index; ``sources``: ``compress share``'s texts (docstrings vs pydoc topics) and the
  weights label;
- ``table``: every method of ``compress share`` and ranking of ``compress prune``, one row each (the only
  place their names are written);
- ``rank`` / ``prune``: layer rankings and the ``compress prune`` experiment (rank-test verdict);
- ``calibrate`` (input moments, cached), ``whiten`` (their square roots), ``lowrank`` (private and
  shared whitened factors, closed-form refit), ``allocate`` (ranks), ``grouping`` (which layers
  share), ``merge`` (LaCo), ``methods`` (every method at one ratio), ``penalty`` (per-projection
  sharing evidence), ``evaluate`` (held-out NLL, paired differences), ``share_run`` (the
  ``compress share`` experiment), ``factorized`` (apply, save small, load into transformers);
  ``save``: the Hugging Face config of a saved model.
"""
