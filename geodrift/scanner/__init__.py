"""The scanner: checkpoints (GGUF, safetensors, HF folders) read as streamed WeightSets and measured.

``readers`` opens any supported file and maps its tensors through the ``names`` tables to canonical
keys; ``fold`` gives the folded (norm gains in) view; ``scan`` runs ``geodrift.continuity.measure``
with the OV composite. ``embedded`` locates the embedded SmolLM2-135M-Instruct GGUF. The Python
function ``geodrift.scan(model_or_path, ...)`` is the face above this package (``geodrift.api``).
"""
