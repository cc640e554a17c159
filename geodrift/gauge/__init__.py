"""The network's exact symmetries (gauges) acting on weight tensors: pure maths, like :mod:`geodrift.metrics`.

- :mod:`geodrift.gauge.orbit`: the exact reparametrisations of a Llama-family state dict
  (gain folding, residual rotation, V/O, Q/K per RoPE pair, Up/Down scaling, hidden permutation).
- :mod:`geodrift.gauge.align`: orbit alignment of two checkpoints (the inverse maps recovered from the
  weights: ``geodrift compare A B --align``).
"""
