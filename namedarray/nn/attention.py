"""``nx.nn.dot_product_attention`` by name: which names are the query and key sequences and the head features.

``jax.nn.dot_product_attention`` reads its axes by position (batch, sequence, heads, head features). On
named values the positions are replaced by names: ``seq_axis`` (the query's sequence), ``kv_seq_axis`` (the
keys' and values' sequence; the same name by default, which suits self-attention), ``head_axis`` (the
features a query and a key contract, also the values' features, which the output carries) and, optionally,
``heads_axis`` (the attention heads: keys and values without it are shared by every head, multi-query
attention, with no copy). Every other name is a batch name. The names that the keys, the values or a
sequence length carry, and the positional axes, are broadcast by name as a batch; a name that only the
query (or a mask, a bias) carries rides along as more query heads over the same keys and values, which are
never copied along it.

That is grouped-query attention by name: a query named ``{batch, seq, kv_heads, q_per_kv, hd}`` over keys
and values named ``{batch, kseq, kv_heads, hd}`` (``heads_axis="kv_heads"``) is jax's ``N = K * G`` query
heads over ``K`` key heads, query head ``n`` using key head ``n // G``; ``nx.unflatten(q, "heads",
{"kv_heads": K, "q_per_kv": G})`` names a query stored in jax's head order so.

``mask`` (True: attend) and ``bias`` broadcast by name over the batch names, ``heads_axis``, ``seq_axis``
and ``kv_seq_axis`` (which must then differ from ``seq_axis``: a mask needs both); ``query_seq_lengths`` and
``key_value_seq_lengths`` carry batch names. ``scale``, ``is_causal``, ``local_window_size`` and
``implementation`` mean what they mean for jax, whose function computes the result in one call.

Without axis names it is ``jax.nn.dot_product_attention`` lifted over the names, which needs the
positional axes it reads: a value whose names leave fewer than three is an error, never a computation on
scalars.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> q = nx.random.normal(jax.random.key(0), named_shape={"batch": 2, "seq": 5, "heads": 4, "hd": 8})
>>> out = nx.nn.dot_product_attention(q, q, q, seq_axis="seq", head_axis="hd", is_causal=True)
>>> out.named_shape == q.named_shape
True
>>> q = nx.random.normal(jax.random.key(1), named_shape={"b": 2, "seq": 5, "kv_heads": 2, "q_per_kv": 3,
...                                                      "hd": 8})
>>> kv = nx.random.normal(jax.random.key(2), named_shape={"b": 2, "kseq": 7, "kv_heads": 2, "hd": 8})
>>> out = nx.nn.dot_product_attention(q, kv, kv, seq_axis="seq", kv_seq_axis="kseq", head_axis="hd",
...                                   heads_axis="kv_heads")          # grouped-query attention
>>> order = ["b", "seq", "kv_heads", "q_per_kv", "hd"]
>>> kvp = kv.unwrap(["b", "kseq", "kv_heads", "hd"])                # jax: (B, S, K, H), K = 2
>>> ref = jax.nn.dot_product_attention(q.unwrap(order).reshape(2, 5, 6, 8), kvp, kvp)   # (B, T, N, H), N = 6
>>> bool(jnp.allclose(out.unwrap(order).reshape(2, 5, 6, 8), ref, atol=1e-5))
True
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ..core import env as _env
from ..core.array import NamedArray, _make
from ..core.layout import align, union
from ..core.shape import join_sizes
from ..engine import dispatch as engine
from ..engine.docstrings import follows_arguments
from ..engine.lifting import lift
from ..errors import AxisSizeError, AxisSpecError, fmt_names

__all__ = ["dot_product_attention"]

_lifted = lift(jax.nn.dot_product_attention, "nx.nn.dot_product_attention", "nn", "dot_product_attention")
_WHERE = "nx.nn.dot_product_attention"


@follows_arguments
def dot_product_attention(query: NamedArray | ArrayLike, key: NamedArray | ArrayLike,
                          value: NamedArray | ArrayLike, bias: NamedArray | ArrayLike | None = None,
                          mask: NamedArray | ArrayLike | None = None, *,
                          seq_axis: str | None = None, kv_seq_axis: str | None = None,
                          head_axis: str | None = None, heads_axis: str | None = None,
                          scale: float | None = None, is_causal: bool = False, query_seq_lengths: Any = None,
                          key_value_seq_lengths: Any = None, local_window_size: Any = None,
                          implementation: str | None = None) -> NamedArray | jax.Array:
    """Scaled dot-product attention along named axes (see the module documentation).

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> q = nx.zeros({"b": 2, "q": 3, "d": 4})
    >>> kv = nx.wrap(jnp.arange(24.0).reshape(2, 3, 4), ["b", "k", "d"])
    >>> mask = nx.arange(3, name="q") >= nx.arange(3, name="k")     # causal, by name
    >>> out = nx.nn.dot_product_attention(q, kv, kv, mask=mask, seq_axis="q", kv_seq_axis="k", head_axis="d")
    >>> out.named_shape, out.unwrap(["b", "q", "d"])[0, 0].tolist()   # the first query sees the first key
    ({'b': 2, 'd': 4, 'q': 3}, [0.0, 1.0, 2.0, 3.0])
    """
    kw = dict(scale=scale, is_causal=is_causal, local_window_size=local_window_size,
              implementation=implementation)
    if seq_axis is None and head_axis is None and kv_seq_axis is None and heads_axis is None:
        operands = (query, key, value, bias, mask, query_seq_lengths, key_value_seq_lengths)
        if any(type(v) is NamedArray and v.names and not v.shape for v in operands[:3]):
            q = next(v for v in operands[:3] if type(v) is NamedArray and v.names and not v.shape)
            raise AxisSpecError(
                f"{_WHERE}: the inputs have named axes ({fmt_names(q.names)}) and no positional ones: say "
                "which names are which, e.g. dot_product_attention(q, k, v, seq_axis='seq', "
                "head_axis='head_dim') (and heads_axis=, kv_seq_axis= where needed); the other names are "
                "batch axes")
        return _lifted(query, key, value, bias, mask, query_seq_lengths=query_seq_lengths,
                       key_value_seq_lengths=key_value_seq_lengths, **kw)
    if seq_axis is None or head_axis is None:
        raise AxisSpecError(f"{_WHERE}: give both seq_axis (the query's sequence) and head_axis (the "
                            f"features a query and a key contract); got seq_axis={seq_axis!r}, "
                            f"head_axis={head_axis!r}")
    kv_seq_axis = seq_axis if kv_seq_axis is None else kv_seq_axis
    # a softmax over the keys and a contraction over the head features need every block of them
    _env.current().require_whole((kv_seq_axis, head_axis), _WHERE)
    if isinstance(local_window_size, list):
        local_window_size = tuple(local_window_size)
    static = (seq_axis, kv_seq_axis, head_axis, heads_axis, tuple(sorted(kw.items())))
    operands = (query, key, value, bias, mask, query_seq_lengths, key_value_seq_lengths)
    labels = ("query", "key", "value", "bias", "mask", "query_seq_lengths", "key_value_seq_lengths")
    engine.require_operands(_WHERE, operands, labels, optional=labels[3:])
    return engine.run(_attention_impl, static, operands)


def _named(v: Any, what: str, need: tuple[str, ...]) -> NamedArray:
    if type(v) is not NamedArray:
        v = _make(jnp.asarray(v), ())
    missing = [n for n in need if n not in v.names]
    if missing:
        raise AxisSpecError(f"{_WHERE}: the {what} lacks axis {fmt_names(missing)} (it has "
                            f"{fmt_names(v.names) or 'no named axes'}, positional shape {v.shape})")
    return v


def _attention_impl(static, q, k, v, bias, mask, q_lens, kv_lens):
    seq, kv_seq, head, heads, kw = static
    q = _named(q, "query", (seq, head) + ((heads,) if heads else ()))
    k = _named(k, "key", (kv_seq, head))
    v = _named(v, "value", (kv_seq, head))
    own = {seq, kv_seq, head, heads}
    extras = {"bias": bias, "mask": mask, "query_seq_lengths": q_lens, "key_value_seq_lengths": kv_lens}
    extras = {what: _named(e, what, ()) for what, e in extras.items() if e is not None}
    allowed = {"bias": (seq, kv_seq, heads), "mask": (seq, kv_seq, heads)}
    for what, e in extras.items():
        if seq == kv_seq and what in allowed and seq in e.names:
            raise AxisSpecError(f"{_WHERE}: the {what} carries axis {seq!r}, which names both the query and "
                                "the key sequence; give the keys' sequence its own name (key.rename(...), "
                                "kv_seq_axis=...) so that the mask says which is which")
        bad = [n for n in e.names if n in own and n not in allowed.get(what, ())]
        if bad:
            raise AxisSpecError(f"{_WHERE}: the {what} carries axis {fmt_names(bad)}, which it cannot vary "
                                "along")
    if heads and (heads in k.names) != (heads in v.names):
        raise AxisSpecError(f"{_WHERE}: the key and the value must both carry {heads!r} or both lack it")
    others = tuple(n for n in union([q, k, v, *extras.values()]) if n not in own)
    labelled = [(q, "query"), (k, "key"), (v, "value"), *((e, w) for w, e in extras.items())]
    sizes = join_sizes([{n: s for n, s in engine.named_sizes(x).items() if n in others} for x, _ in labelled],
                       _WHERE, [w for _, w in labelled])
    join_sizes([{head: x.named_shape[head]} for x in (q, k, v)], _WHERE, ["query", "key", "value"])
    join_sizes([{kv_seq: k.named_shape[kv_seq]}, {kv_seq: v.named_shape[kv_seq]}], _WHERE, ["key", "value"])
    try:
        pshape = tuple(np.broadcast_shapes(*(x.shape for x, _ in labelled)))
    except ValueError:
        raise AxisSizeError(f"{_WHERE}: the positional (batch) shapes do not broadcast: " + ", ".join(
            f"{w} {x.shape}" for x, w in labelled)) from None
    T, S, H = q.named_shape[seq], k.named_shape[kv_seq], q.named_shape[head]
    if heads:
        n_q = q.named_shape[heads]
        for x, w in ((k, "key"), (v, "value"), *((e, w) for w, e in extras.items() if w in allowed)):
            if heads in x.names and x.named_shape[heads] != n_q:
                hint = ""
                if w in ("key", "value") and n_q % x.named_shape[heads] == 0:
                    g = n_q // x.named_shape[heads]
                    hint = (f"; for grouped-query attention split the query's heads by name, e.g. "
                            f"nx.unflatten(query, {heads!r}, {{{heads!r}: {x.named_shape[heads]}, "
                            f"'q_per_kv': {g}}}), a group name that the key and the value lack (query head "
                            f"n then uses key head n // {g})")
                raise AxisSizeError(f"{_WHERE}: axis {heads!r} has size {n_q} in the query but size "
                                    f"{x.named_shape[heads]} in the {w}{hint}")
    for w, e in extras.items():
        for n, size, whose in ((seq, T, "query"), (kv_seq, S, "key")):
            if w in allowed and n in e.names and e.named_shape[n] != size:
                raise AxisSizeError(f"{_WHERE}: axis {n!r} has size {e.named_shape[n]} in the {w} but size "
                                    f"{size} in the {whose}")
    # The batch: the names the key, the value or a sequence length carry, and the positional axes (NumPy's
    # rules). The names none of them carries ride along with the query as query heads ("groups"), K*G heads
    # in all over the K key heads, group-minor: query head n uses key head n // G, as jax groups them. The
    # keys and values are never broadcast over a name only the query (or a mask, a bias) carries.
    kv_side = set(k.names) | set(v.names)
    for w in ("query_seq_lengths", "key_value_seq_lengths"):
        if w in extras:
            kv_side |= set(extras[w].names)
    batch = tuple(n for n in others if n in kv_side)
    kv_heads = (heads,) if heads and heads in k.names else ()
    groups = ((heads,) if heads and not kv_heads else ()) + tuple(n for n in others if n not in kv_side)
    full = {**sizes, seq: T, kv_seq: S, head: H, **({heads: q.named_shape[heads]} if heads else {})}
    B = math.prod(pshape) * math.prod(full[n] for n in batch)
    K = math.prod(full[n] for n in kv_heads)
    N = K * math.prod(full[n] for n in groups)

    def lay(x, tail: tuple[str, ...], fill: tuple[str, ...], shape4: tuple[int, ...],
            broadcast_batch: bool = True):
        """``x`` as ``shape4``: (B or 1, ...) with ``tail`` names last, broadcast along ``fill`` (and the
        batch, with ``broadcast_batch``), size 1 along the other names it lacks."""
        names = batch + tail
        target = {**({n: full[n] for n in batch} if broadcast_batch else {}), **{n: full[n] for n in fill},
                  **engine.named_sizes(x)}
        d = align(x, names, {n: target.get(n, 1) for n in names}, pos=len(pshape))
        if broadcast_batch:
            d = jnp.broadcast_to(d, pshape + d.shape[len(pshape):])
        return d.reshape(shape4)

    qt = (seq,) + kv_heads + groups + (head,)
    qd = lay(q, qt, qt, (B, T, N, H))
    kd = lay(k, (kv_seq,) + kv_heads + (head,), (), (B, S, K, H))
    vd = lay(v, (kv_seq,) + kv_heads + (head,), (), (B, S, K, H))
    out4 = {}
    for what in ("bias", "mask"):
        e = extras.get(what)
        if e is None:
            continue
        varies = bool(e.shape) or any(n in batch for n in e.names)
        per_head = any(n in e.names for n in kv_heads + groups)
        dims = (N if per_head else 1, T if seq in e.names else 1, S if kv_seq in e.names else 1)
        out4[what] = lay(e, kv_heads + groups + (seq, kv_seq), (kv_heads + groups) if per_head else (),
                         ((B if varies else 1),) + dims, broadcast_batch=varies)
    lens = {}
    for what in ("query_seq_lengths", "key_value_seq_lengths"):
        e = extras.get(what)
        if e is not None:
            lens[what] = lay(e, (), (), (B,)).astype(jnp.int32)
    out = jax.nn.dot_product_attention(qd, kd, vd, out4.get("bias"), out4.get("mask"), **lens, **dict(kw))
    names = batch + qt
    return _make(out.reshape(pshape + tuple(full[n] for n in names)), names)
