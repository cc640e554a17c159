"""``geodrift merge``: merge checkpoints of one architecture, after bringing them into one gauge.

- :mod:`geodrift.merging.methods`: the merge rules on state dicts (linear, slerp, task arithmetic, TIES, DARE);
- :mod:`geodrift.merging.frame`: whether two models sit in one gauge, what alignment recovers, their lineage;
- :mod:`geodrift.merging.inputs`: the pre-flight (architecture, shapes, tokenizer) and reading the inputs;
- :mod:`geodrift.merging.write`: the Hugging Face folder written;
- :mod:`geodrift.merging.evaluate`: held-out NLL of a state dict;
- :mod:`geodrift.merging.rebasin`: the baselines of the seed-pair barriers (Git Re-Basin weight matching,
  rotation-symmetry matching).

Checkpoints are reached through :mod:`geodrift.pretrained` (the one door from checkpoints to models), as
``compress`` reaches them. docs/merge.md says what each step means and what was measured.
"""
