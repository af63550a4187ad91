r"""Recurrent layers and multi-head attention, written out in the torch operations they are made
of and run inside the mode, so that each part gets its rule: :data:`HANDLERS` for ``torch.lstm``,
``torch.gru``, ``torch.rnn_tanh``/``rnn_relu``, their cells, and ``F.multi_head_attention_forward``.
Gates (sigmoids) are held constant in their products (signal-take-all, Arras et al. 2017), the
weights get the composite's rule, sums split in proportion.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lrp_lib.explain.mode.graph_check import UnsupportedModelError
from lrp_lib.explain.mode.handlers import arg


__all__ = ["HANDLERS"]


def _rnn_cell(mode, func, args, kwargs):
    """``torch.gru_cell`` / ``torch.rnn_tanh_cell`` / ``torch.rnn_relu_cell`` (``nn.GRUCell``, ``nn.RNNCell``):
    written out in the torch operations they are made of and run inside the mode, so each part gets
    its rule (the weights theirs, the gates the product rules, tanh the identity)."""
    if kwargs or len(args) < 4:
        return mode.blocked(func, func.__name__, args, kwargs)
    x, h, w_ih, w_hh = args[:4]
    b_ih = args[4] if len(args) > 4 else None
    b_hh = args[5] if len(args) > 5 else None
    with mode:
        if func.__name__ == "gru_cell":
            return _gru_step(x, h, w_ih, w_hh, b_ih, b_hh)
        act = torch.tanh if func.__name__ == "rnn_tanh_cell" else torch.relu
        return act(F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh))


def _lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    """One LSTM step in torch operations (run inside the mode): the gates ``i, f, o`` are sigmoids
    (held constant in their products: signal-take-all, Arras et al. 2017), the cell input ``g`` a tanh
    (identity rule), :math:`c' = f c + i g` split in proportion, :math:`h' = o \tanh(c')`, and
    ``h' @ w_hr.T`` with ``proj_size``."""
    gates = F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, -1)
    i, f, o, g = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(g)
    c = f * c + i * g
    h = o * torch.tanh(c)
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_step(x, h, w_ih, w_hh, b_ih, b_hh):
    """One GRU step as ``torch.gru_cell`` computes it: reset and update gates are sigmoids (gates),
    :math:`n = \tanh(W_{in} x + b_{in} + r (W_{hn} h + b_{hn}))`, :math:`h' = (1 - z) n + z h`."""
    gi, gh = F.linear(x, w_ih, b_ih), F.linear(h, w_hh, b_hh)
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def _rnn(mode, func, args, kwargs):
    """``torch.lstm`` / ``torch.gru`` / ``torch.rnn_tanh`` / ``torch.rnn_relu`` (``nn.LSTM``, ``nn.GRU``,
    ``nn.RNN``, so PyG's ``LSTMAggregation``, ``SAGEConv(aggr="lstm")``, ``Set2Set``, ``GRUAggregation``):
    the recurrence written out step by step (layers, both directions, ``batch_first``, ``proj_size``)
    in the torch operations of :func:`_lstm_step` / :func:`_gru_step`, run inside the mode so that the
    weights get the composite's rule, the gates are held constant (signal-take-all, Arras et al.,
    "Explaining Recurrent Neural Network Predictions in Sentiment Analysis", WASSA 2017) and the sums
    split in proportion.  Packed sequences and dropout between layers in training mode are refused."""
    name = func.__name__
    if kwargs or len(args) != 9 or not isinstance(args[1], (tuple, list, Tensor)) or (
            isinstance(args[1], Tensor) and args[1].dtype == torch.long):
        return mode.blocked(func, f"{name} on a packed sequence (pass a padded tensor)", args, kwargs)
    x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first = args
    if train and dropout and num_layers > 1:
        raise UnsupportedModelError(f"{name} with dropout={dropout} between layers in training mode in "
                                    f"{mode.module_label()}: relevance of a random mask is not defined; call "
                                    f"model.eval() (PyG's Explainer does)")
    lstm = name == "lstm"
    dirs = 2 if bidirectional else 1
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
                w_ih, w_hh = w[0], w[1]
                b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
                w_hr = w[-1] if (lstm and per == (5 if has_biases else 3)) else None
                h, c = h0[k], (c0[k] if lstm else None)
                steps = seq.unbind(0)
                order = range(len(steps) - 1, -1, -1) if d == 1 else range(len(steps))
                out = [None] * len(steps)
                for t in order:
                    if lstm:
                        h, c = _lstm_step(steps[t], h, c, w_ih, w_hh, b_ih, b_hh, w_hr)
                    elif name == "gru":
                        h = _gru_step(steps[t], h, w_ih, w_hh, b_ih, b_hh)
                    else:
                        act = torch.tanh if name == "rnn_tanh" else torch.relu
                        h = act(F.linear(steps[t], w_ih, b_ih) + F.linear(h, w_hh, b_hh))
                    out[t] = h
                outs.append(torch.stack(out, 0))
                h_n.append(h)
                c_n.append(c)
            seq = outs[0] if dirs == 1 else torch.cat(outs, -1)
        output = seq.transpose(0, 1) if batch_first else seq
        if lstm:
            return output, torch.stack(h_n, 0), torch.stack(c_n, 0)
        return output, torch.stack(h_n, 0)


def _lstm_cell(mode, func, args, kwargs):
    """``torch.lstm_cell`` (``nn.LSTMCell``): :func:`_lstm_step` inside the mode; returns ``(h', c')``."""
    if kwargs or len(args) < 4:
        return mode.blocked(func, func.__name__, args, kwargs)
    x, (h, c), w_ih, w_hh = args[0], args[1], args[2], args[3]
    b_ih = args[4] if len(args) > 4 else None
    b_hh = args[5] if len(args) > 5 else None
    with mode:
        return _lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh)


def _float_mask(mask: Tensor | None, dtype) -> Tensor | None:
    """A boolean attention mask (True: not attended) as torch's additive float mask (-inf there)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not mask.is_floating_point():
        raise TypeError(f"attention masks must be bool or floating point, got {mask.dtype}")
    return mask.to(dtype)


def _multi_head_attention(mode, func, args, kwargs):
    r"""``F.multi_head_attention_forward`` (``nn.MultiheadAttention``, so ``nn.TransformerEncoderLayer``
    and PyG's ``GPSConv``): written out in torch operations and run inside the mode --

    .. math::
        q = x_q W_q^	op + b_q,\quad k = x_k W_k^	op + b_k,\quad v = x_v W_v^	op + b_v
        	ext{ (per head)},\qquad
        A = \mathrm{softmax}ig(q k^	op / \sqrt{d} + Mig),\qquad
        y = ig[A vig]_{	ext{heads}} W_o^	op + b_o

    so the projections get the composite's rule for their weights, :math:`q k^	op` (two
    input-dependent factors) the uniform rule on each product term, the softmax AttnLRP's rule and
    :math:`A v` the attention rule: with ``attention="cp"`` (default) :math:`A` is held constant and
    all relevance goes to the values (CP-LRP, Ali et al., ICML 2022); with ``attention="uniform"``
    half goes through :math:`A` to the scores (AttnLRP, Achtibat et al., ICML 2024).  The mask
    :math:`M` (``attn_mask``, ``key_padding_mask``, bool or float; ``is_causal`` with its mask) is a
    constant: its finite entries keep their share of the scores' relevance, its ``-inf`` entries are
    filled in (no relevance).  ``need_weights`` (averaged over heads or not) is returned as torch
    returns it.  Refused: ``bias_k``/``bias_v``, ``add_zero_attn``, ``static_k``/``static_v``
    (blocked, with their name) and dropout in training mode."""
    names = ("query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias",
             "bias_k", "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training",
             "key_padding_mask", "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
             "k_proj_weight", "v_proj_weight", "static_k", "static_v", "average_attn_weights", "is_causal")
    defaults = dict(training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                    use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None, v_proj_weight=None,
                    static_k=None, static_v=None, average_attn_weights=True, is_causal=False)
    p = {n: arg(args, kwargs, i, n, defaults.get(n)) for i, n in enumerate(names)}
    unsupported = [n for n in ("bias_k", "bias_v", "static_k", "static_v") if p[n] is not None]
    if p["add_zero_attn"]:
        unsupported.append("add_zero_attn")
    if unsupported:
        return mode.blocked(func, f"multi_head_attention_forward with {', '.join(unsupported)}", args, kwargs)
    weights = [p[n] for n in ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias",
                              "q_proj_weight", "k_proj_weight", "v_proj_weight")]
    if any(mode.is_marked(w) for w in weights):
        return mode.blocked(func, "multi_head_attention_forward with input-dependent weights", args, kwargs)
    if p["training"] and p["dropout_p"]:
        raise UnsupportedModelError(f"attention dropout (p={p['dropout_p']}) in training mode in "
                                    f"{mode.module_label()}: relevance of a random mask is not defined; call "
                                    f"model.eval() (PyG's Explainer does)")
    query, key, value, heads = p["query"], p["key"], p["value"], p["num_heads"]
    batched = query.dim() == 3
    kpm, attn_mask = p["key_padding_mask"], p["attn_mask"]
    if p["is_causal"] and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint.")
    with mode:
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            kpm = None if kpm is None else kpm.unsqueeze(0)
        tgt, bsz, embed = query.shape
        src = key.shape[0]
        if embed != p["embed_dim_to_check"] or embed % heads:
            raise ValueError(f"multi_head_attention_forward: embedding dimension {embed} does not match "
                             f"embed_dim_to_check={p['embed_dim_to_check']} or is not divisible by num_heads={heads}")
        hd = embed // heads
        b = p["in_proj_bias"]
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        if p["use_separate_proj_weight"]:
            wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
        else:
            wq, wk, wv = p["in_proj_weight"].chunk(3)
        q = F.linear(query, wq, bq).reshape(tgt, bsz * heads, hd).transpose(0, 1)
        k = F.linear(key, wk, bk).reshape(src, bsz * heads, hd).transpose(0, 1)
        v = F.linear(value, wv, bv).reshape(src, bsz * heads, hd).transpose(0, 1)
        mask = _float_mask(attn_mask, q.dtype)
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(0)
        kpm = _float_mask(kpm, q.dtype)
        if kpm is not None:
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
        out = torch.bmm(attn, v)
        out = out.transpose(0, 1).reshape(tgt * bsz, embed)
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



HANDLERS: dict[str, Callable] = {
    "gru_cell": _rnn_cell, "rnn_tanh_cell": _rnn_cell, "rnn_relu_cell": _rnn_cell, "lstm_cell": _lstm_cell,
    "lstm": _rnn, "gru": _rnn, "rnn_tanh": _rnn, "rnn_relu": _rnn,
    "multi_head_attention_forward": _multi_head_attention,
}
