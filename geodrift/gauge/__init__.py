"""Gauges of Llama-family checkpoints: exact reparametrisations, alignment and diagnosis (issue 31)."""
