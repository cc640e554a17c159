"""Fine-tuning experiments: does a weights-only signal predict forgetting? (issue 41, the paper's future work)

- ``spec``: :class:`~geodrift.finetune.spec.FinetuneSpec`, one fine-tuning run (model, corpus, learning rate,
  steps, checkpoints, what to measure), and the grid presets;
- ``train``: the run itself - full fine-tuning (or LoRA through ``peft``) of the embedded SmolLM2-135M or any
  local ``transformers`` causal LM, checkpoints as Hugging Face folders, held-out NLL on fixed windows;
- ``evaluate``: per-window NLLs and the paired differences between checkpoints;
- ``indicators``: the weights-only indicators of a checkpoint against its base (through the scanner);
- ``probes``: what needs data - the first-order Taylor / EWC prediction, single-layer reverts, per-layer merges;
- ``analysis``: the grid's answer - rank correlations with bootstrap intervals, the control's signs, per-layer rho.

Layer: beside ``geodrift.sweep`` and ``geodrift.pretrained`` (it reaches models through ``pretrained``, and the
sweep runs its runs as one more kind of job).
"""
