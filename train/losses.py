"""The training losses beside the level loss: within-task ranking (pairwise, ListMLE), the CMD
domain term, and trace-token dropout."""

from __future__ import annotations

import torch

from cdmpp.errors import InputError


def pairwise_rank_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor, margin: float = 0.0):
    """RankNet loss (Burges et al., ICML 2005) over same-group pairs.

    For every pair ``(i, j)`` of one group whose targets differ by more than ``margin``,
    with ``target[i] > target[j]``, adds ``softplus(-(pred[i] - pred[j]))``.

    Args:
        pred, target: float32 ``(B,)`` (any monotone scale of log-latency).
        group: int64 ``(B,)`` task of each program.

    Returns:
        The mean over such pairs (a scalar tensor); 0 when the batch has none.
    """
    diff_t = target.unsqueeze(1) - target.unsqueeze(0)
    pair = (group.unsqueeze(1) == group.unsqueeze(0)) & (diff_t > margin)
    if not bool(pair.any()):
        return pred.sum() * 0.0
    diff_p = pred.unsqueeze(1) - pred.unsqueeze(0)
    return torch.nn.functional.softplus(-diff_p[pair]).mean()


def within_task_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """MSE of the within-task part: each program's deviation from its task's batch mean,
    predicted against measured.

    For programs ``i`` of task ``g`` in the batch, ``((pred_i - mean_g pred) - (target_i -
    mean_g target))^2``, averaged over programs whose task has at least 2 programs in the
    batch.  A prediction that places each task's level right but explains none of its
    spread scores the task's label variance here; a perfect one scores 0.

    Args:
        pred, target: float32 ``(B,)`` (standardised log-latency).
        group: int64 ``(B,)`` task of each program.

    Returns:
        A scalar tensor; 0 when no task has two programs in the batch.
    """
    _, inv = torch.unique(group, return_inverse=True)
    k = int(inv.max()) + 1 if inv.numel() else 0
    count = torch.zeros(k, dtype=pred.dtype, device=pred.device).index_add_(0, inv, torch.ones_like(pred))
    keep = count[inv] > 1
    if not bool(keep.any()):
        return pred.sum() * 0.0
    mean_p = torch.zeros(k, dtype=pred.dtype, device=pred.device).index_add_(0, inv, pred) / count
    mean_t = torch.zeros(k, dtype=pred.dtype, device=pred.device).index_add_(0, inv, target) / count
    diff = (pred - mean_p[inv]) - (target - mean_t[inv])
    return diff[keep].pow(2).mean()


def listmle_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Position-weighted ListMLE over each task's programs in the batch, fastest first.

    For a task with programs ``1..n`` in the batch, ordered by measured latency (fastest
    first) and scored ``s = -pred`` (a higher score is a faster program), the term is
    ``sum_k w_k (log sum_{j >= k} exp(s_j) - s_k) / sum_k w_k`` with ``w_k = 1 /
    log2(k + 1)`` (``k`` from 1): the negative log-likelihood of the measured order under
    the Plackett-Luce model (ListMLE; Xia et al., ICML 2008), each place weighted as in
    NDCG so that placing the fastest programs first weighs most (position-aware
    ListMLE; Lan et al., AAAI 2014).  TLP (ASPLOS 2023) trains its cost model with a
    listwise ranking loss (LambdaRank); this one needs no sort inside the loss's graph.

    Args:
        pred, target: float32 ``(B,)`` standardised log-latency, predicted and measured.
        group: int64 ``(B,)`` task of each program.

    Returns:
        The mean over tasks with at least 2 programs in the batch (a scalar tensor); 0
        when there is none.  Only the order within each task counts: adding a constant
        to a task's predictions leaves it unchanged.
    """
    total, tasks = pred.sum() * 0.0, 0
    for g in torch.unique(group):
        at = torch.nonzero(group == g, as_tuple=True)[0]
        if at.numel() < 2:
            continue
        order = at[torch.argsort(target[at], stable=True)]
        s = -pred[order].float()
        tail = torch.logcumsumexp(s.flip(0), dim=0).flip(0)  # log sum_{j >= k} exp(s_j)
        w = 1.0 / torch.log2(torch.arange(2, s.numel() + 2, dtype=s.dtype, device=s.device))
        total = total + ((tail - s) * w).sum() / w.sum()
        tasks += 1
    return total / max(tasks, 1)


def central_moment_discrepancy(source: torch.Tensor, target: torch.Tensor, moments: int = 5) -> torch.Tensor:
    """Central moment discrepancy between two samples of embeddings.

    Zellinger et al., "Central Moment Discrepancy (CMD) for Domain-Invariant
    Representation Learning", ICLR 2017, eq. (4), with the activation range taken as
    1: ``||E(s) - E(t)||_2 + sum_{k=2..K} ||c_k(s) - c_k(t)||_2``, where ``c_k`` is
    the element-wise ``k``-th central moment.  CDMPP (EuroSys 2024, section 5) adds it
    to the loss so that programs of unseen networks or devices are embedded like the
    training programs.

    Args:
        source: float32 ``(N, D)``.
        target: float32 ``(M, D)``.
        moments: ``K >= 1``.

    Returns:
        A scalar tensor (0 for identical samples), differentiable in both inputs.

    Raises:
        ValueError: widths differ, a sample is empty, or ``moments < 1``.
    """
    if source.ndim != 2 or target.ndim != 2 or source.shape[1] != target.shape[1]:
        raise InputError(f"CMD needs (N, D) and (M, D) samples, got {tuple(source.shape)} and {tuple(target.shape)}")
    if source.shape[0] == 0 or target.shape[0] == 0 or moments < 1:
        raise InputError(f"CMD needs non-empty samples and moments >= 1, got {source.shape[0]}, {target.shape[0]}, {moments}")
    ms, mt = source.mean(0), target.mean(0)
    out = torch.linalg.vector_norm(ms - mt)
    cs, ct = source - ms, target - mt
    for k in range(2, moments + 1):
        out = out + torch.linalg.vector_norm(cs.pow(k).mean(0) - ct.pow(k).mean(0))
    return out


def drop_trace_tokens(x: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    """Trace dropout: ``mask`` with the trace token (the first position, flagged in the
    last column: :func:`cdmpp.featurize.trace.with_trace_tokens`) of each program masked
    out with probability ``p``, so that the program is seen as its leaves alone.  A
    program without a leaf besides its token keeps it.

    Args:
        x: float32 ``(B, L, F)`` padded rows; mask: bool ``(B, L)``.

    Returns:
        bool ``(B, L)``, a new mask.
    """
    has = (x[:, 0, -1] == 1) & mask[:, 0] & (mask.sum(1) > 1)
    drop = has & (torch.rand(has.shape, device=mask.device) < p)
    out = mask.clone()
    out[:, 0] = mask[:, 0] & ~drop
    return out
