"""The toy residual MLP (paper section 4.1), always shaped as an ensemble of ``E`` members.

One member computes ``h0 = E x`` (in_dim -> D), ``h_{l+1} = h_l + act(W_l h_l)`` for ``l < L``
(no bias) and ``logits = H h_L`` (D -> classes). ``E`` same-shaped members (different seeds) are
trained together with batched matmuls: a single run is ``E = 1``. Members never interact: the loss
is the sum of per-member losses and every supported optimiser is element-wise, so a member's
trajectory is the same maths as training it alone.

Parameters (shapes): ``embed (E, D, in_dim)``, ``blocks (E, L, D, D)`` (``blocks[e, l]`` is
``W_l`` in ``nn.Linear`` orientation ``(d_out, d_in)``), ``head (E, classes, D)``; with LayerNorm
``ln_weight, ln_bias (E, L, D)``. ``weightset(member)`` / ``gradset(member)`` expose a member's
block weights and gradients as WeightSets (role ``block``) for ``geodrift.continuity.measure``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from geodrift.errors import GeodriftError
from geodrift.lm.activations import get_activation
from geodrift.sim.config import MLPConfig
from geodrift.weights import WeightSet


class ResidualMLP(nn.Module):
    """An ensemble of ``members`` toy MLPs.

    Args:
        in_dim: input features (784 for MNIST).
        n_classes: output classes.
        d_model, n_layers, activation, residual, norm, init_std: the architecture (see
            ``geodrift.sim.config.MLPConfig``).
        seeds: one seed per member; member ``e`` is initialised from ``torch.Generator().manual_seed(seeds[e])``.

    Example:
        >>> m = ResidualMLP(64, 10, d_model=16, n_layers=3, seeds=[1, 2])
        >>> m(torch.zeros(2, 5, 64)).shape
        torch.Size([2, 5, 10])
    """

    def __init__(self, in_dim: int, n_classes: int, *, d_model: int, n_layers: int, activation: str = "relu",
                 residual: bool = True, norm: str = "none", init_std: float | None = None,
                 seeds: Sequence[int] = (0,)) -> None:
        super().__init__()
        self.residual, self.norm, self.n_layers = residual, norm, n_layers
        self.act = get_activation(activation)
        D, L, E = d_model, n_layers, len(seeds)
        embed, blocks, head = [], [], []
        for seed in seeds:
            gen = torch.Generator().manual_seed(int(seed))
            # PyTorch's nn.Linear default: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
            embed.append(_uniform((D, in_dim), in_dim, gen))
            if init_std is None:
                blocks.append(_uniform((L, D, D), D, gen))
            else:
                blocks.append(torch.randn((L, D, D), generator=gen) * init_std)
            head.append(_uniform((n_classes, D), D, gen))
        self.embed = nn.Parameter(torch.stack(embed))  # (E, D, in_dim)
        self.blocks = nn.Parameter(torch.stack(blocks))  # (E, L, D, D)
        self.head = nn.Parameter(torch.stack(head))  # (E, C, D)
        if norm != "none":
            self.ln_weight = nn.Parameter(torch.ones(E, L, D))
            self.ln_bias = nn.Parameter(torch.zeros(E, L, D))

    @property
    def members(self) -> int:
        return int(self.blocks.shape[0])

    def _ln(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        # h (E, B, D); per-member affine (E, 1, D)
        normed = F.layer_norm(h, h.shape[-1:])
        return normed * self.ln_weight[:, layer, None, :] + self.ln_bias[:, layer, None, :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (E, B, in_dim)`` -> logits ``(E, B, classes)``."""
        placement, residual = self.norm, self.residual
        h = torch.bmm(x, self.embed.mT)  # (E, B, D)
        # unbind once: its backward stacks the L gradients in one op (slicing per layer would
        # allocate a full (E, L, D, D) zero gradient per layer)
        weights_t = self.blocks.mT.unbind(1)  # L x (E, D_in, D_out)
        for layer in range(self.n_layers):
            inp = self._ln(h, layer) if placement == "pre" else h
            branch = self.act(torch.bmm(inp, weights_t[layer]))
            if placement == "branch":
                branch = self._ln(branch, layer)
            h = h + branch if residual else branch
            if placement == "post":
                h = self._ln(h, layer)
        return torch.bmm(h, self.head.mT)


    def weightset(self, member: int = 0, origin: str = "simulator") -> WeightSet:
        """Member ``member``'s block matrices ``W_l`` as a WeightSet (role ``block``; detached, CPU)."""
        return _blocks_weightset(self.blocks.detach()[member], origin)

    def gradset(self, member: int = 0, origin: str = "simulator gradients") -> WeightSet:
        """Member ``member``'s current gradients ``dL/dW_l`` as a WeightSet (role ``block``)."""
        grad = self.blocks.grad
        if grad is None:
            raise GeodriftError("gradset: no gradient yet; call backward() first")
        return _blocks_weightset(grad.detach()[member], origin)


def _blocks_weightset(blocks: torch.Tensor, origin: str) -> WeightSet:
    # blocks: (L, D, D) -> {("block", l): W_l}
    cpu = blocks.cpu()
    return WeightSet.from_tensors({("block", layer): cpu[layer] for layer in range(cpu.shape[0])}, origin=origin)


def _uniform(shape: tuple[int, ...], fan_in: int, gen: torch.Generator) -> torch.Tensor:
    bound = 1.0 / fan_in**0.5
    return (torch.rand(shape, generator=gen) * 2.0 - 1.0) * bound


def build_mlp(cfg: MLPConfig, in_dim: int, n_classes: int, seeds: Sequence[int],
              device: torch.device | str = "cpu") -> ResidualMLP:
    """Build the ensemble for ``seeds`` on ``device`` (the only MLPConfig -> module builder)."""
    return ResidualMLP(in_dim, n_classes, d_model=cfg.d_model, n_layers=cfg.n_layers, activation=cfg.activation,
                       residual=cfg.residual, norm=cfg.norm, init_std=cfg.init_std, seeds=seeds).to(device)


def ensemble_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Sum over members of the mean cross-entropy; stats are per member.

    Args:
        batch: ``x (E, B, in_dim)``, ``y (E, B)``.

    Returns:
        ``(loss, {"loss": (E,), "acc": (E,)})`` - the scalar to backpropagate and detached stats.
    """
    x, y = batch
    logits = model(x)  # (E, B, C)
    per_member = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)
    acc = (logits.argmax(-1) == y).float().mean(1)
    return per_member.sum(), {"loss": per_member.detach(), "acc": acc.detach()}
