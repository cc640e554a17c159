"""The simulators: the paper's residual MLP and a Llama-style transformer, trained with one run skeleton.

``config`` (RunSpec, presets, ablations) -> ``run`` (build, train with ``train``, track with
``track``, record with ``record``) -> ``reproduce`` (seeds aggregated, claims judged, the paper's
numbers from ``reference`` beside them). Models: ``mlp`` here, the Llama in ``geodrift.lm``;
data: ``data`` (images) here, text and tokenizers in ``geodrift.lm``. Weights and gradients leave the models as WeightSets and are measured by
``geodrift.continuity``, the same code that scans checkpoints.
"""
