"""`geodrift merge [--base BASE] A B ... --method ... --align ... --out DIR`: an orbit-aware merge to a Hugging Face folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli import choices
from geodrift.cli.options import MaxMemory, Quiet

app = typer.Typer()


@app.command("merge", short_help="Merge checkpoints after bringing them into one gauge.")
def merge_command(
    models: Annotated[list[str], typer.Argument(help="The models to merge (.gguf, .safetensors, Hugging Face "
                                                "folders), one architecture and shape.")],
    out: Annotated[Path, typer.Option("--out", help="The Hugging Face folder to write (safetensors, config.json, the "
                                      "tokenizer files); new, or geodrift's earlier output with --force.")],
    base: Annotated[str | None, typer.Option("--base", help="The model A B ... were fine-tuned from: the reference "
                                             "every model is aligned to, and the base of the task vectors "
                                             "(task-arithmetic, ties, dare need it; slerp starts from it).")] = None,
    method: Annotated[choices.MergeMethod, typer.Option("--method", help="linear (weighted average), slerp (two "
                      "models), task-arithmetic, ties or dare (task vectors added to --base).")] = choices.MergeMethod.linear,
    align: Annotated[choices.AlignMode, typer.Option("--align", help="auto: bring a model into the reference's gauge "
                     "when alignment removes at least a tenth of their weight distance (it leaves two fine-tunes "
                     "of one base as they are); on: always; off: never.")] = choices.AlignMode.auto,
    weights: Annotated[str | None, typer.Option("--weights", help="One weight per model after --base, e.g. 0.7,0.3 "
                                                "(default 1 each; linear normalises them).")] = None,
    t: Annotated[float, typer.Option("--t", help="slerp: position from the first model to the second.")] = 0.5,
    density: Annotated[float, typer.Option("--density", help="ties/dare: share of each task vector kept.")] = 0.5,
    scale: Annotated[float, typer.Option("--scale", help="task-arithmetic/ties/dare: factor on the merged task "
                                         "vector.")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="dare: seed of the random drops.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace geodrift's earlier output in --out.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    quiet: Quiet = False, max_memory: MaxMemory = "8G",
) -> None:
    """Merge checkpoints after bringing them into one gauge: refuses models that differ in architecture, shapes,
    tokenizer or lineage, says whether they sit in one gauge and what alignment recovered, and writes a folder
    that transformers loads."""
    from geodrift.jobs.merge import MergeRequest, parse_weights, run_merge
    from geodrift.render.merge import show_merge
    from geodrift.render.progress import ConsoleEvents

    request = MergeRequest(models=tuple(models), out=out, base=base, method=method.value, align=align.value,
                           weights=parse_weights(weights), t=t, density=density, scale=scale, seed=seed, force=force,
                           max_memory=max_memory)
    with ConsoleEvents(quiet=quiet, reserve_stdout=as_json) as events:
        result = run_merge(request, events)
    show_merge(result, as_json=as_json)
