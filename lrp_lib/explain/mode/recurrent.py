r"""Recurrent layers and multi-head attention written out in torch operations and run inside the mode, so that
each part gets its rule: :data:`HANDLERS` for ``torch.lstm``, ``gru``, ``rnn_tanh``/``rnn_relu``, their cells, and
``F.multi_head_attention_forward``.  Gates (sigmoids) are held constant in their products (signal-take-all, Arras
et al., WASSA 2017)."""
from __future__ import annotations

import inspect
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lrp_lib.explain.mode import UnsupportedModelError

__all__ = ["HANDLERS"]


def _step(kind, x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    r"""One step of ``kind``: ``(h', c')``, ``c'`` None but for an LSTM.  ``"lstm"``: gates ``i, f, o``
    (sigmoids), cell input ``g`` (a tanh), :math:`c' = f c + i g`, :math:`h' = o \tanh(c')`, and ``h' @ w_hr.T``
    with ``proj_size``; ``"gru"`` as ``torch.gru_cell`` computes it: gates ``r, z`` (sigmoids),
    :math:`n = \tanh(W_{in} x + b_{in} + r (W_{hn} h + b_{hn}))`, :math:`h' = (1 - z) n + z h`; ``"rnn_tanh"``,
    ``"rnn_relu"``: :math:`h' = act(W_{ih} x + b_{ih} + W_{hh} h + b_{hh})`."""
    gi, gh = F.linear(x, w_ih, b_ih), F.linear(h, w_hh, b_hh)
    if kind == "lstm":
        i, f, g, o = (gi + gh).chunk(4, -1)
        i, f, o, g = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(g)
        c = f * c + i * g
        h = o * torch.tanh(c)
        return (h if w_hr is None else F.linear(h, w_hr)), c
    if kind == "gru":
        (i_r, i_z, i_n), (h_r, h_z, h_n) = gi.chunk(3, -1), gh.chunk(3, -1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h, None
    return (torch.tanh if kind == "rnn_tanh" else torch.relu)(gi + gh), None


def _cell(mode, func, args, kwargs):
    """``torch.lstm_cell``, ``gru_cell``, ``rnn_tanh_cell``, ``rnn_relu_cell`` (``nn.LSTMCell``, ``nn.GRUCell``,
    ``nn.RNNCell``): :func:`_step` inside the mode."""
    if kwargs or len(args) < 4:
        return mode.blocked(func, func.__name__, args, kwargs)
    kind = func.__name__[:-len("_cell")]
    x, hx, w_ih, w_hh, b_ih, b_hh = (*args, None, None)[:6]  # (without biases: None)
    h, c = hx if kind == "lstm" else (hx, None)
    with mode:
        h, c = _step(kind, x, h, c, w_ih, w_hh, b_ih, b_hh)
    return (h, c) if kind == "lstm" else h


def _rnn(mode, func, args, kwargs):
    """``torch.lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``; PyG's
    ``SAGEConv(aggr="lstm")``, ``Set2Set``): :func:`_step` after step inside the mode (layers, both directions,
    ``batch_first``, ``proj_size``).  Refused: packed sequences, dropout between layers in training mode."""
    name = func.__name__
    if kwargs or len(args) != 9 or not isinstance(args[1], (tuple, list, Tensor)) or (
            isinstance(args[1], Tensor) and args[1].dtype == torch.long):
        return mode.blocked(func, f"{name} on a packed sequence (pass a padded tensor)", args, kwargs)
    x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first = args
    if train and dropout and num_layers > 1:
        raise UnsupportedModelError(f"{name} with dropout={dropout} between layers in training mode in "
                                    f"{mode.module_label()}: relevance of a random mask is not defined; call "
                                    f"model.eval() (PyG's Explainer does)")
    lstm, dirs = name == "lstm", 2 if bidirectional else 1
    per = len(params) // (num_layers * dirs)
    if per * num_layers * dirs != len(params):
        return mode.blocked(func, f"{name} with {len(params)} weights for {num_layers} layers", args, kwargs)
    h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
    with mode:
        seq = x.transpose(0, 1) if batch_first else x  # (time, batch, features)
        h_n, c_n = [], []
        for layer in range(num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                w = list(params[k * per:(k + 1) * per])
                b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
                w_hr = w[-1] if (lstm and per == (5 if has_biases else 3)) else None
                h, c = h0[k], (c0[k] if lstm else None)
                out = []
                for step in (reversed(seq.unbind(0)) if d == 1 else seq.unbind(0)):  # (backward: from the end)
                    h, c = _step(name, step, h, c, w[0], w[1], b_ih, b_hh, w_hr)
                    out.append(h)
                outs.append(torch.stack(out[::-1] if d == 1 else out, 0))
                h_n.append(h)
                c_n.append(c)
            seq = outs[0] if dirs == 1 else torch.cat(outs, -1)
        output = seq.transpose(0, 1) if batch_first else seq
        return (output, torch.stack(h_n, 0), torch.stack(c_n, 0)) if lstm else (output, torch.stack(h_n, 0))


def _float_mask(mask: Tensor | None, dtype) -> Tensor | None:
    """A boolean attention mask (True: not attended) as torch's additive float mask (-inf there)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not mask.is_floating_point():
        raise TypeError(f"attention masks must be bool or floating point, got {mask.dtype}")
    return mask.to(dtype)


#: The signature whose arguments :func:`_multi_head_attention` reads.
_MHA = inspect.signature(F.multi_head_attention_forward)


def _multi_head_attention(mode, func, args, kwargs):
    r"""``F.multi_head_attention_forward`` (``nn.MultiheadAttention``, so ``nn.TransformerEncoderLayer``
    and PyG's ``GPSConv``): written out in torch operations and run inside the mode --

    .. math::
        q = x_q W_q^\top + b_q,\quad k = x_k W_k^\top + b_k,\quad v = x_v W_v^\top + b_v
        \text{ (per head)},\qquad
        A = \mathrm{softmax}\big(q k^\top / \sqrt{d} + M\big),\qquad
        y = \big[A v\big]_{\text{heads}} W_o^\top + b_o

    so the projections get the composite's rule, :math:`q k^\top` the uniform rule on each product term, the
    softmax AttnLRP's rule and :math:`A v` the attention rule: with ``attention="cp"`` (default) :math:`A` is
    held constant and all relevance goes to the values (CP-LRP, Ali et al., ICML 2022); with
    ``attention="uniform"`` half goes through :math:`A` to the scores (AttnLRP, Achtibat et al., ICML 2024).
    The mask :math:`M` (``attn_mask``, ``key_padding_mask``, bool or float) is a constant: its finite entries
    keep their share, its ``-inf`` entries are filled in.  Blocked: ``bias_k``/``bias_v``, ``add_zero_attn``,
    ``static_k``/``static_v``; refused: dropout in training mode."""
    bound = _MHA.bind(*args, **kwargs)
    bound.apply_defaults()
    p = bound.arguments
    unsupported = [n for n in ("bias_k", "bias_v", "static_k", "static_v") if p[n] is not None]
    if p["add_zero_attn"]:
        unsupported.append("add_zero_attn")
    if unsupported:
        return mode.blocked(func, f"multi_head_attention_forward with {', '.join(unsupported)}", args, kwargs)
    if any(mode.is_marked(p[n]) for n in ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias",
                                          "q_proj_weight", "k_proj_weight", "v_proj_weight")):
        return mode.blocked(func, "multi_head_attention_forward with input-dependent weights", args, kwargs)
    if p["training"] and p["dropout_p"]:
        raise UnsupportedModelError(f"attention dropout (p={p['dropout_p']}) in training mode in "
                                    f"{mode.module_label()}: relevance of a random mask is not defined; call "
                                    f"model.eval() (PyG's Explainer does)")
    query, key, value, heads = p["query"], p["key"], p["value"], p["num_heads"]
    batched, kpm, attn_mask = query.dim() == 3, p["key_padding_mask"], p["attn_mask"]
    if p["is_causal"] and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint.")
    with mode:
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            kpm = None if kpm is None else kpm.unsqueeze(0)
        (tgt, bsz, embed), src = query.shape, key.shape[0]
        if embed != p["embed_dim_to_check"] or embed % heads:
            raise ValueError(f"multi_head_attention_forward: embedding dimension {embed} does not match "
                             f"embed_dim_to_check={p['embed_dim_to_check']} or is not divisible by num_heads={heads}")
        hd = embed // heads
        bq, bk, bv = (None, None, None) if p["in_proj_bias"] is None else p["in_proj_bias"].chunk(3)
        wq, wk, wv = ((p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]) if p["use_separate_proj_weight"]
                      else p["in_proj_weight"].chunk(3))
        q, k, v = (F.linear(t, w, b).reshape(t.shape[0], bsz * heads, hd).transpose(0, 1)  # (batch x heads, length, hd)
                   for t, w, b in ((query, wq, bq), (key, wk, bk), (value, wv, bv)))
        mask = _float_mask(attn_mask, q.dtype)
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(0)
        if (kpm := _float_mask(kpm, q.dtype)) is not None:
            kpm = kpm.view(bsz, 1, 1, src).expand(-1, heads, -1, -1).reshape(bsz * heads, 1, src)
            mask = kpm if mask is None else mask + kpm
        scores = torch.bmm(q * (1.0 / hd) ** 0.5, k.transpose(-2, -1))
        if mask is not None:
            blocked = torch.isneginf(mask)
            finite = mask.masked_fill(blocked, 0.0)
            if bool((finite != 0).any()):
                scores = scores + finite
            if bool(blocked.any()):
                scores = scores.masked_fill(blocked, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = torch.bmm(attn, v).transpose(0, 1).reshape(tgt * bsz, embed)
        out = F.linear(out, p["out_proj_weight"], p["out_proj_bias"]).view(tgt, bsz, -1)
        weights = None
        if p["need_weights"]:
            weights = attn.view(bsz, heads, tgt, src)
            if p["average_attn_weights"]:
                weights = weights.mean(dim=1)
            if not batched:
                weights = weights.squeeze(0)
        if not batched:
            out = out.squeeze(1)
    return out, weights


HANDLERS: dict[str, Callable] = {"gru_cell": _cell, "rnn_tanh_cell": _cell, "rnn_relu_cell": _cell, "lstm_cell": _cell,
                                 "lstm": _rnn, "gru": _rnn, "rnn_tanh": _rnn, "rnn_relu": _rnn,
                                 "multi_head_attention_forward": _multi_head_attention}
