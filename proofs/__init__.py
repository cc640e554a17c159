"""Symbolic proofs of the symmetry claims (imports sympy only, never torch)."""
