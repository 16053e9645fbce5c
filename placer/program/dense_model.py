"""The dense part of a DLRM: bottom MLP, interaction (dot, concat or DCNv2), top MLP, BCE loss.

One definition serves both interpreters of the step program: the runner executes it, and program/dense.py
traces it on the meta device to list the ops it issues.

Shapes follow cost.py's DenseModelCost exactly, so the FLOPs the model prices are the FLOPs that run:
- bottom MLP: num_dense_features -> bottom_mlp[0] -> ... with ReLU after every layer (DLRM reference).
- dot: the vectors are the bottom MLP's output (when there is a bottom MLP) and every pooled feature. Vectors
  of different widths are ZERO-PADDED to the widest one, so the dot product of two vectors is taken over their
  common leading coordinates (no extra parameters; a fixed projection would add FLOPs the cost model does not
  price). The strictly lower triangle of the Gram matrix, V(V-1)/2 values, is concatenated with the bottom
  output (or the raw dense features when there is no bottom MLP) and fed to the top MLP.
- concat: bottom output and all pooled features concatenated.
- dcnv2: x0 = concat as above (width D); each of ``layers`` low-rank cross layers computes
  x_{l+1} = x0 * (U (V x_l) + b) + x_l with V: D -> rank (no bias), U: rank -> D (with bias).
- top MLP: ReLU between layers, the last layer (1 output) is the logit; BCE-with-logits loss.
"""
from __future__ import annotations

import torch
from torch import nn

from placer.specs.workload import Workload


def _mlp(width: int, layers: list[int], relu_last: bool) -> tuple[nn.Sequential, int]:
    mods: list[nn.Module] = []
    for i, out in enumerate(layers):
        mods.append(nn.Linear(width, out))
        if relu_last or i < len(layers) - 1:
            mods.append(nn.ReLU())
        width = out
    return nn.Sequential(*mods), width


class LowRankCross(nn.Module):
    def __init__(self, width: int, rank: int):
        super().__init__()
        self.V = nn.Linear(width, rank, bias=False)
        self.U = nn.Linear(rank, width, bias=True)

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * self.U(self.V(x)) + x


class DenseDLRM(nn.Module):
    """Bottom MLP + interaction + top MLP of a workload. ``forward(dense, embeddings) -> logits (B,)``, where
    ``embeddings`` is a list of (B, dim_f) pooled features in workload feature order."""

    def __init__(self, workload: Workload):
        super().__init__()
        d = workload.dense
        by_name = {t.name: t for t in workload.tables}
        self.dims = [by_name[f.table].dim for f in workload.resolved_features]
        self.kind = d.interaction.kind
        self.has_bottom = bool(d.bottom_mlp)
        self.bottom, bottom_out = _mlp(d.num_dense_features, list(d.bottom_mlp), relu_last=True)
        F = len(self.dims)
        emb_total = sum(self.dims)
        if self.kind == "dot":
            vectors = F + (1 if self.has_bottom else 0)
            self.pad_to = max(self.dims + ([bottom_out] if self.has_bottom else []))
            # vectors grouped by width (bottom output first), so padding costs a few kernels per distinct
            # width rather than per feature; the Gram matrix is taken over the vectors in this order
            widths = ([bottom_out] if self.has_bottom else []) + self.dims
            self.groups = [[i for i, w in enumerate(widths) if w == width] for width in dict.fromkeys(widths)]
            # made on the CPU, then moved: on the meta device (program/dense.py's trace) tril_indices runs its
            # Python reference, whose first call imports torch's decompositions (2.7 s on a 2-core machine)
            li, lj = torch.tril_indices(vectors, vectors, offset=-1, device="cpu").to(torch.get_default_device())
            self.register_buffer("li", li, persistent=False)
            self.register_buffer("lj", lj, persistent=False)
            top_in = vectors * (vectors - 1) // 2 + bottom_out
        elif self.kind == "concat":
            top_in = emb_total + bottom_out
        else:
            D = emb_total + bottom_out
            self.cross = nn.ModuleList(LowRankCross(D, d.interaction.rank) for _ in range(d.interaction.layers))
            top_in = D
        self.top, _ = _mlp(top_in, list(d.top_mlp), relu_last=False)
        self.top_in = top_in

    def forward(self, dense: torch.Tensor, embeddings: list[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)
        if self.kind == "dot":
            vecs = ([x] if self.has_bottom else []) + list(embeddings)
            w = self.pad_to
            parts = [torch.stack([vecs[i] for i in group], dim=1) for group in self.groups]
            T = torch.cat([p if p.shape[2] == w else nn.functional.pad(p, (0, w - p.shape[2])) for p in parts], dim=1)
            Z = torch.bmm(T, T.transpose(1, 2))
            z = torch.cat([x, Z[:, self.li, self.lj]], dim=1)
        else:
            z = torch.cat([x] + list(embeddings), dim=1)
            if self.kind == "dcnv2":
                x0 = z
                for layer in self.cross:
                    z = layer(x0, z)
        return self.top(z).squeeze(1)


def make_dense_optimizer(model: nn.Module, name: str, lr: float, foreach: bool | None = None,
                         capturable: bool = False) -> torch.optim.Optimizer:
    """The workload's optimizer for the dense parameters (rowwise_adagrad is plain Adagrad for dense).
    ``foreach``: multi-tensor kernels (the runner asks for them on CUDA, not on a CPU). ``capturable`` (CUDA
    only): Adam keeps its step counts on the device, so that a CUDA graph replays its bias corrections (SGD
    has no step count; Adagrad's stays on the host and is read only for a learning-rate decay, none here)."""
    params = list(model.parameters())
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, foreach=foreach)
    if name in ("adagrad", "rowwise_adagrad"):
        return torch.optim.Adagrad(params, lr=lr, foreach=foreach)
    return torch.optim.Adam(params, lr=lr, foreach=foreach, capturable=capturable)
