"""``geodrift prove``: each symbolic claim of ``geodrift.proofs`` (sympy) and its numeric twin (torch).

``runner`` derives a claim, then cross-checks it numerically; ``symmetry`` holds the activation
checks (equivariance, symmetry breaking, commutants); ``gauge`` the gauge and Noether checks, run on
the simulator's own models (``geodrift.sim.mlp.ResidualMLP``, ``geodrift.lm.llama.LlamaLM``).
"""

from geodrift.prove.runner import ClaimResult, ProveReport, run_claims

__all__ = ["ClaimResult", "ProveReport", "run_claims"]
