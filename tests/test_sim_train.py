"""The shared training loop on the toy MLP: golden losses, determinism, resume, ensembles, optimisers, schedule."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest
import torch
from sim_helpers import first_losses, mnist5k, smoke_result, smoke_spec

from geodrift.errors import GeodriftError
from geodrift.io.atomic import to_json
from geodrift.sim.config import TrainConfig
from geodrift.sim.data import ShuffledBatches
from geodrift.sim.mlp import build_mlp, ensemble_loss
from geodrift.sim.record import load_record
from geodrift.sim.run import checkpoint_path, run, run_seeds
from geodrift.sim.train import make_optimizer, make_scheduler, resolve_device, train

# Pinned from this implementation (torch 2.x CPU, 2026-12): guards the model, init, data order,
# split and optimiser against silent regressions. Not the paper's numbers (it has none at this size).
GOLDEN_RELU_SEED42 = [2.606189489364624, 2.3813424110412598, 2.366126775741577, 2.066378355026245,
                      2.011869192123413]
GOLDEN_NONE_SEED123 = [2.4865288734436035, 2.4334473609924316, 2.0738658905029297, 1.9659903049468994,
                       2.05379581451416]


def test_smoke_preset_first_losses_match_the_pinned_golden_values():
    assert first_losses(smoke_spec(0), 42, 5) == pytest.approx(GOLDEN_RELU_SEED42, rel=1e-5)
    assert first_losses(smoke_spec(1), 123, 5) == pytest.approx(GOLDEN_NONE_SEED123, rel=1e-5)


def test_same_seed_gives_bitwise_identical_records_and_reports_on_cpu():
    a = smoke_result(0, 42)
    b = run(smoke_spec(0), [42], device="cpu")[0]
    assert a.record.rows == b.record.rows
    assert a.record.summary == b.record.summary
    assert a.record.vectors == b.record.vectors
    assert to_json(a.report.to_dict()) == to_json(b.report.to_dict())


def test_train_config_has_no_seed_and_two_seeds_give_different_records():
    assert "seed" not in {f.name for f in fields(TrainConfig)} and "device" not in {f.name for f in fields(TrainConfig)}
    with pytest.raises(TypeError):
        TrainConfig(seed=1)  # type: ignore[call-arg]
    a, b = smoke_result(0, 42).record, smoke_result(0, 43).record
    assert (a.seed, b.seed) == (42, 43)
    assert a.select("train", None, "loss") != b.select("train", None, "loss")
    assert a.select("W", "block", "cont", "v", 1) != b.select("W", "block", "cont", "v", 1)


def test_interrupted_and_resumed_run_equals_uninterrupted_run(tmp_path):
    spec = smoke_spec(0)
    full = smoke_result(0, 42)
    partial = run(spec, [42], out=tmp_path, stop_at=17, device="cpu")[0]
    assert partial.record.status == "partial"
    ckpt = checkpoint_path(tmp_path, spec.label, [42])
    assert ckpt.is_file()
    resumed = run(spec, [42], out=tmp_path, resume=True, device="cpu")[0]
    assert resumed.record.status == "complete"
    assert resumed.record.rows == full.record.rows and resumed.record.summary == full.record.summary
    assert to_json(resumed.report.to_dict()) == to_json(full.report.to_dict())
    assert load_record(tmp_path / "Res+ReLU" / "seed42").rows == full.record.rows
    assert not ckpt.exists()  # a complete run needs no checkpoint


def test_resume_refuses_a_checkpoint_of_another_configuration(tmp_path):
    spec = smoke_spec(0)
    run(spec, [42], out=tmp_path, stop_at=5, device="cpu")
    other = replace(spec, train=replace(spec.train, lr=2e-3))
    with pytest.raises(GeodriftError, match="another configuration"):
        run(other, [42], out=tmp_path, resume=True, device="cpu")


def test_batched_ensemble_matches_sequential_runs_member_by_member():
    spec = smoke_spec(0)
    batched = run_seeds(spec, [42, 43], batched=True, device="cpu")
    sequential = [smoke_result(0, 42), smoke_result(0, 43)]
    for b, s in zip(batched, sequential, strict=True):
        assert b.record.seed == s.record.seed
        for key in ("W v1", "G v1", "Gcum v1", "acc", "rel_change"):
            assert b.record.summary[key] == pytest.approx(s.record.summary[key], abs=1e-3), key
    assert batched[0].record.timing["members"] == 2.0


def test_grad_clip_with_a_batched_ensemble_is_refused():
    spec = smoke_spec(0)
    clipped = replace(spec, train=replace(spec.train, grad_clip=1.0))
    with pytest.raises(GeodriftError, match="grad_clip"):
        run(clipped, [1, 2], device="cpu")


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_every_optimizer_trains_the_smoke_model_down(name):
    spec = smoke_spec(0)
    cfg = replace(spec.train, optimizer=name, lr=0.01 if name == "sgd" else 1e-3)
    losses = first_losses(replace(spec, train=cfg), 42, 30)
    assert sum(losses[-5:]) < sum(losses[:5])


def test_make_optimizer_passes_adam_hyperparameters():
    p = torch.nn.Parameter(torch.zeros(2))
    opt = make_optimizer([p], TrainConfig(beta1=0.0, beta2=0.5, eps=1.0))
    assert opt.param_groups[0]["betas"] == (0.0, 0.5) and opt.param_groups[0]["eps"] == 1.0


def _documented_factor(t: int, cfg: TrainConfig) -> float:
    # TrainConfig: linear warm-up over warmup_steps ((t + 1) / warmup), then cosine to min_lr_ratio at the last step.
    if t < cfg.warmup_steps:
        return (t + 1) / cfg.warmup_steps
    progress = min(1.0, (t - cfg.warmup_steps) / (cfg.steps - cfg.warmup_steps))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def test_cosine_schedule_is_a_lambda_lr_with_the_documented_factors():
    cfg = TrainConfig(lr=0.1, steps=20, schedule="cosine", warmup_steps=5, min_lr_ratio=0.1)
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg)
    sched = make_scheduler(opt, cfg)
    assert isinstance(sched, torch.optim.lr_scheduler.LambdaLR)
    factor = sched.lr_lambdas[0]
    for t in range(cfg.steps + 1):
        assert factor(t) == pytest.approx(_documented_factor(t, cfg), abs=1e-12), t
    assert factor(0) == pytest.approx(0.2) and factor(4) == 1.0 and factor(5) == 1.0
    assert factor(cfg.steps) == pytest.approx(cfg.min_lr_ratio)
    assert all(factor(t + 1) <= factor(t) for t in range(5, cfg.steps))
    constant = make_scheduler(opt, TrainConfig(steps=20)).lr_lambdas[0]
    assert {constant(t) for t in range(21)} == {1.0}


def test_loop_clips_then_steps_then_schedules():
    # SGD without momentum: the update at step t is exactly -factor(t) * lr * clip(g_t), where clip
    # rescales the raw gradient to the global norm grad_clip. The learning rate in force while step t's
    # loss is computed is the one its update uses (the scheduler steps after the optimiser).
    cfg = TrainConfig(optimizer="sgd", momentum=0.0, lr=0.5, steps=8, schedule="cosine", warmup_steps=3,
                      min_lr_ratio=0.2, grad_clip=0.05)
    model = torch.nn.Linear(6, 3)
    with torch.no_grad():
        model.weight.copy_(torch.randn(3, 6, generator=torch.Generator().manual_seed(0)))
        model.bias.fill_(0.1)

    class Batches:
        def batch(self, step: int) -> torch.Tensor:
            return torch.randn(16, 6, generator=torch.Generator().manual_seed(100 + step)) * 3.0

    opt = make_optimizer(model.parameters(), cfg)
    seen: list[tuple[float, list[torch.Tensor], list[torch.Tensor]]] = []  # (lr, params before, raw gradients)

    def loss_fn(m: torch.nn.Module, x: torch.Tensor):  # type: ignore[no-untyped-def]
        w, b = (p.detach().clone().requires_grad_(True) for p in (m.weight, m.bias))  # independent copies
        raw = torch.autograd.grad(torch.nn.functional.linear(x, w, b).pow(2).mean(), [w, b])
        seen.append((opt.param_groups[0]["lr"], [w.detach(), b.detach()], list(raw)))
        return m(x).pow(2).mean(), {}

    after: list[list[torch.Tensor]] = []
    end = train(model, Batches(), loss_fn, opt, make_scheduler(opt, cfg), steps=cfg.steps, grad_clip=cfg.grad_clip,
                on_step=lambda done, loss: after.append([p.detach().clone() for p in (model.weight, model.bias)]))
    assert end == cfg.steps and len(after) == cfg.steps
    for t, ((lr, before, raw), new) in enumerate(zip(seen, after, strict=True)):
        assert lr == pytest.approx(cfg.lr * _documented_factor(t, cfg), abs=1e-12), t
        total = math.sqrt(sum(float(g.pow(2).sum()) for g in raw))
        assert total > 10 * cfg.grad_clip  # the clip is active at every step
        scale = cfg.grad_clip / (total + 1e-6)  # torch's clip coefficient
        for p_new, p_old, g in zip(new, before, raw, strict=True):
            assert torch.allclose(p_new, p_old - lr * scale * g, atol=1e-6, rtol=1e-5), t


def test_unavailable_cuda_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(GeodriftError, match="--device cuda"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu"
    with pytest.raises(GeodriftError, match="--device"):
        resolve_device("tpu")


def test_divergence_names_the_step():
    data = mnist5k()
    spec = smoke_spec(0)
    model = build_mlp(spec.model, data.in_dim, data.n_classes, [1])  # type: ignore[arg-type]
    with torch.no_grad():
        model.head.fill_(float("inf"))
    opt = make_optimizer(model.parameters(), spec.train)
    with pytest.raises(GeodriftError, match="at step 0"):
        train(model, ShuffledBatches(data, [1], 8), ensemble_loss, opt, make_scheduler(opt, spec.train), steps=3)


def test_resume_reuses_complete_records_without_training(tmp_path):
    spec = smoke_spec(0)
    first = run(spec, [42], out=tmp_path, device="cpu")[0]
    record_file = tmp_path / "Res+ReLU" / "seed42" / "run.json"
    stamp = record_file.stat().st_mtime_ns
    again = run(spec, [42], out=tmp_path, resume=True, device="cpu")[0]
    assert again.record.rows == first.record.rows
    assert record_file.stat().st_mtime_ns == stamp  # not rewritten: nothing was retrained
