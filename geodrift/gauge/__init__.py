"""The network's exact symmetries (gauges) acting on weight tensors: pure maths, like :mod:`geodrift.metrics`.

- :mod:`geodrift.gauge.orbit`: the exact reparametrisations of a Llama-family state dict
  (gain folding, residual rotation, V/O, Q/K per RoPE pair, Up/Down scaling, hidden and head permutations).
- :mod:`geodrift.gauge.align`: orbit alignment of two checkpoints (the inverse maps recovered from the
  weights: ``geodrift compare A B --align``).
- :mod:`geodrift.gauge.canonical`: one canonical point of each layer's orbit (balanced, signed against the
  token embedding's mean, sorted; no residual basis), what ``--view canonical`` scans.
- :mod:`geodrift.gauge.status`: which gauges move each reported number in each view (the report's
  ``gauge`` / ``moved_by`` labels).
"""
