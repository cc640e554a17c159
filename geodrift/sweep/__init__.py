"""Sweeps: independent runs (configuration x seed x data set) of either simulator, on a backend.

- ``geodrift.sweep.grid``: jobs from a preset (``preset_grid`` of a ``geodrift.sim.experiment.Experiment``)
  or a user-written grid file (``load_grid``; format in its docstring and the README);
- ``geodrift.sweep.runner``: ``run_sweep(jobs, backend=...)`` runs them on a local process pool
  (default) or on Ray (``backend="ray"``; the optional extra ``geodrift[sweep]``), each run asking for
  its CPUs/GPU, a failed run reported with its error without stopping the others; then
  ``sweep_reproduction`` aggregates the outcomes with ``geodrift.sim.reproduce.assemble`` - the same
  tables and verdicts as an in-process ``geodrift simulate``, whichever backend ran the runs;
  ``run_grid(grid, ...)`` does all of it for one grid (options checked, ``--out`` prepared).
"""
