r"""What the relevance starts from: the explained tensor (:func:`explained_of`) and its relevance
(:func:`start_relevance`)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.explain.config import ModelConfig, ModelMode, ModelReturnType

__all__ = ["explained_of", "start_relevance", "start_of", "check_index", "check_graph_rows"]


def explained_of(name: str | None, out: Tensor, logits: Tensor | None, model_config: ModelConfig) -> Tensor:
    """What the relevance starts from: ``out``, or ``logits`` where ``name`` is the classifier's final softmax,
    log_softmax or sigmoid whose input they are (a regression model's final sigmoid is explained as it is)."""
    if name is not None and (model_config.mode != ModelMode.regression or name != "sigmoid"):
        return logits
    if model_config.return_type != ModelReturnType.raw:
        raise ValueError(
            f"return_type={model_config.return_type.value!r}: LRP explains the logits before the probabilities, "
            f"but the model's output is not computed by a final softmax, log_softmax or sigmoid of them (its last "
            f"operation is something else); return the logits and use return_type='raw'")
    return out


def check_index(index, rows: int) -> None:
    """An error for an ``index`` (an int, a slice, a list of ints, an integer or boolean tensor) that selects
    rows the model's output (``rows`` of them) does not have."""
    if index is None or isinstance(index, slice):
        return
    if isinstance(index, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in index):
        index = torch.tensor(index, dtype=torch.long)
    if isinstance(index, bool) or not isinstance(index, (int, Tensor)):
        raise TypeError(f"index must be an int, a slice, a list of ints or a tensor of row numbers, got "
                        f"{type(index).__name__}")
    if isinstance(index, Tensor):
        if index.dtype == torch.bool:
            if index.numel() != rows:
                raise ValueError(f"index is a boolean mask of {index.numel()} entries but the model gives {rows} "
                                 f"output row(s)")
            return
        if index.is_floating_point() or index.is_complex():
            raise TypeError(f"index must hold integer row numbers, got dtype {index.dtype}")
        if not index.numel():
            return
        low, high = int(index.min()), int(index.max())
    else:
        low = high = index
    if low < -rows or high >= rows:
        raise IndexError(f"index selects rows {low}..{high} but the model gives {rows} output row(s) "
                         f"(valid: 0..{rows - 1}, or negative from the end)")


def start_of(out: Tensor, head: Tensor, target, index, model_config: ModelConfig, explained: str = "logit") -> Tensor:
    """:func:`start_relevance` of ``head`` (the explained output of the model's output ``out``), with ``target``
    the class labels or a function of ``out`` giving them (:class:`lrp_lib.explain.one_pass.OnePass`)."""
    if callable(target) and not isinstance(target, Tensor):
        target = target(out)
    return start_relevance(head, target, index, model_config, explained)


def start_relevance(out: Tensor, target: Tensor, index, model_config: ModelConfig, explained: str = "logit") -> Tensor:
    r"""The relevance of the outputs ``out`` (the model's output, or the logits before its probability head):
    the explained value where explained, else 0; multiclass, the target class's logit :math:`z_c`
    (``explained="logit"``) or :math:`z_c - \frac{1}{K-1}\sum_{k \ne c} z_k` (``"contrast"``); binary (one logit
    :math:`z` per row), :math:`+z` for target 1 and :math:`-z` for target 0 (the target class's log-odds);
    regression, the output.  ``index`` (None: every row) selects the explained rows; ``target`` holds one class
    label per row (multiclass with ``index``: or per explained row).  Errors name the argument (a float target,
    a wrong length, a label out of range)."""
    if out.dim() == 0:  # one value (a link predictor given one link as a 1-D pair): a row of one
        return start_relevance(out.detach().reshape(1), target, index, model_config, explained).reshape(())
    out = out.detach()
    shape = (-1, *([1] * (out.dim() - 1)))  # a value per row, broadcast over the rest
    mode = model_config.mode
    check_index(index, out.shape[0])
    if mode != ModelMode.regression:
        if not isinstance(target, Tensor) or target.is_floating_point() or target.is_complex():
            got = target.dtype if isinstance(target, Tensor) else type(target).__name__
            raise TypeError(f"target must be an integer tensor of class labels, got {got}")
        if target.numel() != out.shape[0] and not (index is not None and mode == ModelMode.multiclass_classification):
            raise ValueError(f"target has {target.numel()} entries but the model gives {out.shape[0]} output "
                             f"row(s): pass one label per row")
        classes = out.shape[-1] if mode == ModelMode.multiclass_classification else 2
        low, high = torch.stack(torch.aminmax(target.view(-1))).tolist() if target.numel() else (0, 0)  # one read
        if low < 0 or high >= classes:
            allowed = "0 or 1 (binary_classification: the class to explain)" if classes == 2 and \
                mode == ModelMode.binary_classification else f"0..{classes - 1} (one per output column)"
            raise ValueError(f"target must contain only {allowed}, got values {low}..{high}")
    if mode == ModelMode.multiclass_classification:
        if index is None and out.dim() == 2 and not (explained == "contrast" and out.shape[-1] > 1):
            at = target.view(-1, 1).to(out.device, torch.long)  # each row's logit of its class, the rest 0
            return torch.zeros_like(out).scatter_(1, at, out.gather(1, at))
        rel = torch.zeros_like(out)
        target = target.view(-1)
        rows = torch.arange(out.shape[0], device=out.device)
        if index is not None:
            rows = rows[index].view(-1)
            target = target[index].view(-1) if target.numel() == out.shape[0] else target
        if explained == "contrast" and out.shape[-1] > 1:
            # z_c - mean_{k != c} z_k: the epsilon rule of that (bias-free) linear map of the logits
            k = out.shape[-1]
            w = torch.full((rows.numel(), k), -1.0 / (k - 1), dtype=out.dtype, device=out.device)
            w[torch.arange(rows.numel(), device=out.device), target] = 1.0
            rel[rows] = out[rows] * w
        else:
            rel[rows, target] = out[rows, target]
        return rel
    if mode == ModelMode.binary_classification:
        if out.shape[-1] != 1 and out.dim() > 1:
            raise ValueError(f"binary_classification expects one logit per row, got output shape {tuple(out.shape)}")
        rel = (target.view(shape).to(out.dtype) * 2 - 1) * out  # the sign of the target class
    else:
        rel = out.clone()
    if index is not None:
        keep = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
        keep[index] = True
        rel = torch.where(keep.view(shape), rel, torch.zeros_like(rel))
    return rel


def check_graph_rows(target, x: Tensor, batch):
    """``target`` (labels, or a function of the output giving them), after checking that a graph-level model gives
    one output row per graph: one that returns a row per node is refused naming both."""
    graphs = int(batch.max()) + 1 if isinstance(batch, Tensor) and batch.numel() == x.shape[0] else 1

    def check(rows: int) -> None:
        if rows != graphs and rows == x.shape[0]:
            raise ValueError(
                f"model_config has task_level='graph', but the model returns {rows} output rows, one per node, not "
                f"one per graph ({graphs}): declare task_level='node' (and pass index=), or pool the node outputs "
                f"into one row per graph (global_mean_pool(h, batch))")
    if isinstance(target, Tensor) and target.dim() > 0:
        check(target.shape[0])
    elif callable(target):
        def checked(out):
            check(out.shape[0] if out.dim() else 1)
            return target(out)
        return checked
    return target
