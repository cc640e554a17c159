"""One simulator object per simulator, and one typed experiment spec built once (issue 19).

Only ``geodrift/sim/simulator.py`` may tell the simulators apart by name; everything else asks the
object (``simulator(name)``, ``Reproduction.simulator``, ``Experiment.simulator``).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
from sim_helpers import smoke_spec

import geodrift.sim.experiment as experiment_module
from geodrift.cli.main import main
from geodrift.errors import GeodriftError
from geodrift.sim.config import SIMULATORS, ImageData, MLPConfig, RunSpec, TrackConfig, TrainConfig
from geodrift.sim.experiment import Experiment, Overrides, build_specs
from geodrift.sim.presets import preset
from geodrift.sim.reproduce import reproduce
from geodrift.sim.simulator import MLP_COLUMNS, TRANSFORMER_COLUMNS, simulator
from geodrift.sweep.grid import grid_from_dict

ROOT = Path(__file__).resolve().parent.parent
OWNER = ROOT / "geodrift" / "sim" / "simulator.py"


def _names_sim(node: ast.expr) -> bool:
    # ``sim``, ``x.sim``, ``x["sim"]``, ``x.get("sim")``: an expression holding a simulator's name.
    if isinstance(node, ast.Name):
        return node.id == "sim"
    if isinstance(node, ast.Attribute):
        return node.attr == "sim"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "sim"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "sim"
    return False


def name_branches(source: str) -> list[int]:
    """Lines that tell simulators apart by name: ``sim == "mlp"``, ``spec.sim != x``, ``"transformer" in (...)``.

    Comparing two simulator names (keeping the records whose ``sim`` is the one asked for) is a filter,
    not a branch: it is allowed.
    """
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        names_a_simulator = any(isinstance(o, ast.Constant) and o.value in SIMULATORS for o in operands)
        sims = [_names_sim(o) for o in operands]
        against_other = any(sims) and not all(sims) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
        if names_a_simulator or against_other:
            lines.append(node.lineno)
    return lines


def test_the_branch_detector_finds_each_form_of_a_name_comparison():
    assert name_branches('if sim == "mlp":\n    pass') == [1]
    assert name_branches('x = a if spec.sim != other else b') == [1]
    assert name_branches('ok = rep.sim == kept.sim == "transformer"') == [1]
    assert name_branches('ok = "transformer" in names') == [1]
    assert name_branches('if record["sim"] != kind:\n    pass') == [1]
    assert name_branches('ok = simulator(spec.sim).per_projection\nmodels = {"mlp": 1}') == []
    assert name_branches('mine = [r for r in runs if r.config.get("sim") == sim]') == []


def test_no_module_but_the_simulator_object_branches_on_a_simulator_name():
    found = []
    for folder in ("geodrift", "cli", "proofs"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != OWNER:
                found += [f"{path.relative_to(ROOT)}:{line}" for line in name_branches(path.read_text(encoding="utf-8"))]
    assert not found, found


def test_every_simulator_of_the_configuration_vocabulary_has_one_object():
    assert tuple(simulator(name).name for name in SIMULATORS) == SIMULATORS
    with pytest.raises(GeodriftError, match="simulator: unknown value 'cnn'; choose one of mlp, transformer"):
        simulator("cnn")


def test_the_objects_answer_what_the_branches_used_to_compare():
    mlp, transformer = simulator("mlp"), simulator("transformer")
    assert (mlp.per_projection, mlp.ensembles, mlp.exports_hf, mlp.throughput) == (
        False, True, False, "steps_per_second")
    assert (transformer.per_projection, transformer.ensembles, transformer.exports_hf, transformer.throughput) == (
        True, False, True, "tokens_per_second")
    assert mlp.seed_groups([1, 2, 3], batched=True) == [[1, 2, 3]]
    assert mlp.seed_groups([1, 2], batched=False) == transformer.seed_groups([1, 2], batched=True) == [[1], [2]]
    assert mlp.columns("table3") == MLP_COLUMNS["table3"] and mlp.columns("smoke")[0] == "acc"
    assert transformer.columns("tiny") == TRANSFORMER_COLUMNS
    cpu = preset("transformer", "cpu")[0]
    assert transformer.units_per_step(cpu) == cpu.train.batch_size * cpu.data.seq_len == 16 * 64  # type: ignore[union-attr]
    assert mlp.units_per_step(smoke_spec()) == 1
    # A grid configuration without a base starts from these (the grid file's documented defaults).
    assert mlp.default_spec() == RunSpec("mlp", "Res+ReLU", MLPConfig(), ImageData(), TrainConfig(), TrackConfig())
    assert transformer.default_spec() == cpu
    assert grid_from_dict({"sim": "mlp", "configs": [{}]}).specs == [mlp.default_spec()]
    with pytest.raises(GeodriftError, match="--save-hf-every: the mlp simulator saves no Hugging Face folders"):
        mlp.save_hf(smoke_spec(), None, Path("unused"), 0)  # type: ignore[arg-type]


def test_ablated_labels_keep_the_papers_names_for_mlp_rows_only():
    assert [s.label for s in build_specs("mlp", "table1", Overrides(ablations=("nores",)))][:2] == [
        "NoRes+GELU", "NoRes+SiLU"]
    assert [s.label for s in build_specs("mlp", "table3", Overrides(ablations=("gelu",)))][0] == "Adam default+gelu"
    assert build_specs("transformer", "tiny", Overrides(ablations=("none", "nores")))[0].label == "tiny+none+nores"
    # Ablations that make two rows identical keep the labels distinct.
    assert [s.label for s in build_specs("mlp", "smoke", Overrides(ablations=("gelu",)))] == ["Res+GELU", "Res+GELU #2"]


def test_overrides_change_only_what_they_name():
    base = preset("transformer", "tiny")[0]
    assert build_specs("transformer", "tiny") == [base] == build_specs("transformer", "tiny", Overrides())
    spec = build_specs("transformer", "tiny", Overrides(steps=7, track_every=0, data="corpus.txt", vocab=300,
                                                        tokenizer="bpe"))[0]
    assert spec.train == replace(base.train, steps=7) and spec.track == replace(base.track, every=0)
    assert spec.data == replace(base.data, corpus="corpus.txt", vocab=300, tokenizer="bpe")  # type: ignore[type-var]
    assert spec.model == base.model and spec.label == base.label
    mlp = build_specs("mlp", "smoke", Overrides(data="digits", tokenizer="bytes"))[0]  # text options: not an MLP's
    assert mlp.data == ImageData("digits") and mlp.model == preset("mlp", "smoke")[0].model


def test_an_experiment_is_consumed_as_given_not_rebuilt_from_its_preset():
    # Specs no preset holds: the reproduction must train exactly these, with these seeds and this name.
    specs = [replace(smoke_spec(i), train=replace(smoke_spec(i).train, steps=4), track=TrackConfig(every=0))
             for i in (0, 1)]
    exp = Experiment("mlp", "handmade", specs, [7])
    rep = reproduce(exp, device="cpu")
    assert rep.specs == specs and rep.seeds == [7] and rep.preset == "handmade"
    assert [(r.record.label, r.record.seed, r.record.preset, r.record.config["train"]["steps"]) for r in rep.results] == [
        ("Res+ReLU", 7, "handmade", 4), ("Res+None", 7, "handmade", 4)]
    assert rep.simulator is simulator("mlp") is exp.simulator
    assert exp.total_steps() == 8 and Experiment("mlp", "x", specs, [1, 2]).total_steps(batched=True) == 8


def test_the_command_line_builds_the_experiment_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]):
    calls: list[tuple[str, str, Overrides | None]] = []
    real = experiment_module.build_specs

    def counted(sim: str, name: str, overrides: Overrides | None = None) -> list[RunSpec]:
        calls.append((sim, name, overrides))
        return real(sim, name, overrides)

    monkeypatch.setattr(experiment_module, "build_specs", counted)
    main_args = ["simulate", "mlp", "--preset", "smoke", "--steps", "3", "--track-every", "0", "--device", "cpu",
                 "--ablation", "gelu", "--json", "--quiet"]
    with pytest.raises(SystemExit) as exit_info:
        main(main_args)
    assert exit_info.value.code == 0
    assert calls == [("mlp", "smoke", Overrides(steps=3, track_every=0, ablations=("gelu",), view="raw"))]
    assert '"Res+GELU #2"' in capsys.readouterr().out
