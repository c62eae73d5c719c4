"""Every public function, given a value of the wrong kind, says so in its own terms.

The sweep calls each callable of ``nx.__all__`` (and of ``nx.nn.__all__`` and ``nx.random.__all__``) with
each of five wrong values (``None``, the list ``[1, 2]``, the string ``"zz"``, ``float("nan")``, the set
``{"a"}``) as its first argument, the other arguments being those of a good call (:data:`GOOD`: a small
NamedArray, a shape dict for the creation functions, a key for ``nx.random``, a function for the
transforms), and again with a good first argument and each wrong value as its second, where the function
takes a second positional argument. A call may succeed: many functions rightly take a list, a scalar or a
string there. If it raises, the error must be one of (:func:`why_not`):

* an nx error: an instance of :class:`~namedarray.errors.NamedAxisError`;
* a ``TypeError`` (or jax's ``NotImplementedError`` for an option it does not implement, such as ``out=``)
  whose message names the function (``nx.pad``, ``pad``) or the argument (its parameter name, ``argument
  1``, ``position 1``) and reads none of the generic wordings in :data:`GENERIC` (Python's "object is not
  iterable", "unhashable type", ..., jax's "Error interpreting argument to <function ...>", "Tracer", ...),
  which tell what went wrong deep inside rather than what the caller passed;
* a ``ValueError`` that NumPy's semantics give: the same call on jax (``jax.numpy``, ``jax.nn`` or
  ``jax.random``), with every NamedArray replaced by what a lifted function sees of it (its positional part
  at index 0 of each named axis), raises a ``ValueError`` too, whose message nx's repeats;
* a ``ValueError`` from nx's own check of a value of an acceptable kind (NaN as a probability, a list where
  a scalar goes), whose message starts with the operation's name (``nx.nn.dropout: rate must be ...``);
* a ``FileNotFoundError`` for the string given as a file path (``"zz"`` is a valid path that does not exist).

Anything else fails: ``AttributeError``, ``KeyError``, ``IndexError`` (other than nx's
:class:`~namedarray.errors.PositionalAxisError`), jax's ``ConcretizationTypeError`` or
``TracerArrayConversionError``, a ``TypeError`` in a generic wording. :data:`SKIP` and :data:`SKIP_AT` list
what is not swept, with the reason (jax's own objects re-exported unchanged, functions that take no
arguments). :func:`test_good_call` checks that each good call succeeds, so that the sweep's errors come from
the wrong value and nothing else.

Each call is traced first (``jax.make_jaxpr``: nothing compiles, so the calls that succeed cost little); one
that fails there runs again eagerly, and the eager error is the one judged, since eager calls take paths
(nx's cached kernels) that traced ones do not.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import re
import types

import jax
import jax.numpy as jnp
import pytest

import namedarray as nx
from namedarray.errors import NamedAxisError
from namedarray.ops import mirror

BAD = {"None": None, "list": [1, 2], "str": "zz", "nan": float("nan"), "set": {"a"}}
SPACES = {"nx": nx, "nn": nx.nn, "random": nx.random}
JAX = {"nx": jnp, "nn": jax.nn, "random": jax.random}  # where each space's functions come from in jax

# Python's and jax's wordings for a value of the wrong kind met deep inside: they name no argument of the
# function that was called (or name jax's internals), so the caller cannot tell what to change.
GENERIC = [
    r"object is not iterable", r"object is not subscriptable", r"unhashable type", r"is unhashable",
    r"unexpected keyword", r"has no attribute", r"object is not callable", r"Error interpreting argument to",
    r"is not a valid JAX type", r"int\(\) argument must be", r"float\(\) argument must be",
    r"cannot be interpreted as an integer", r"len\(\) of unsized object", r"tuple index out of range",
    r"Shapes must be 1D sequences of concrete values", r"Non-hashable static arguments",
    r"unsupported operand type", r"not supported between instances of", r"must be real number, not",
    r"<locals>", r"Tracer", r"takes \d+ positional arguments? but \d+ (were|was) given",
    r"missing \d+ required positional argument",
]


@functools.cache
def samples() -> types.SimpleNamespace:
    """Tiny good arguments, built once (eager calls on them are cheap)."""
    ints = jnp.arange(6).reshape(2, 3)
    return types.SimpleNamespace(
        x=nx.wrap(jnp.arange(6.0).reshape(2, 3), ["A", "H"]),  # every axis named
        xp=nx.wrap(jnp.arange(6.0).reshape(2, 3), ["A", ...]),  # A=2 named, (3,) positional
        m=nx.wrap(jnp.arange(18.0).reshape(2, 3, 3), ["A", ...]),  # A=2 named, (3, 3) positional
        m4=nx.wrap(jnp.ones((2, 2, 2, 2)), ["A", ...]),  # A=2 named, (2, 2, 2) positional
        xi=nx.wrap(ints, ["A", ...]),
        xu8=nx.wrap(ints.astype(jnp.uint8), ["A", ...]),
        xn=nx.wrap(jnp.array([0.0, 2.0, 1.0])),  # no names: for functions whose output size depends on values
        mask=nx.wrap(jnp.array([[True, False, True], [False, True, True]]), ["A", ...]),
        idx0=nx.wrap(jnp.zeros((2, 3), int), ["A", ...]),
        plain=jnp.arange(3.0),
        time=nx.wrap(jnp.arange(6.0).reshape(2, 3), ["time", ...]),
        qkv=nx.ones({"B": 1, "T": 2, "D": 2}),
        key=jax.random.key(0),
    )


def _identity(v):
    return v


def _step(carry, v):
    return carry, v


# A good call of each function that one plain NamedArray does not make: (positional arguments, keywords).
GOOD = {
    "NamedArray": lambda s: ((jnp.arange(3.0), ("A",)), {}),
    "NamedShape": lambda s: (({"A": 2},), {}),
    "SerialLoop": lambda s: ((2,), {}),
    "all_gather": lambda s: ((s.xp, "A"), {}),
    "along": lambda s: (("A", jnp.sin), {}),
    "all_to_all": lambda s: ((s.m4, "A", 0, 0), {}),
    "apply_along_axis": lambda s: ((jnp.sum, 0, s.xp), {}),
    "apply_over_axes": lambda s: ((jnp.sum, s.xp, [0]), {}),
    "arange": lambda s: ((3,), {}),
    "argpartition": lambda s: ((s.xp, 1), {}),
    "argwhere": lambda s: ((s.xp,), {"axis_name": "nz"}),
    "array_repr": lambda s: ((s.plain,), {}),
    "array_split": lambda s: ((s.xp, 2), {}),
    "array_str": lambda s: ((s.plain,), {}),
    "astype": lambda s: ((s.xp, jnp.int32), {}),
    "axis_index": lambda s: (("A",), {}),
    "axis_rules": lambda s: (({"A": None},), {}),
    "axis_size": lambda s: (("A",), {}),
    "bartlett": lambda s: ((3,), {}),
    "bincount": lambda s: ((s.xi,), {"length": 6}),
    "blackman": lambda s: ((3,), {}),
    "canonical_order": lambda s: ((["A", "H"],), {}),
    "choose": lambda s: ((s.idx0, [s.xp, s.xp]), {"mode": "clip"}),
    "compress": lambda s: ((jnp.array([True, False, True]), s.xn), {}),
    "delete": lambda s: ((s.xp, 1), {}),
    "ds": lambda s: ((0, 2), {}),
    "dsplit": lambda s: ((s.m4, 2), {}),
    "dynamic_slice": lambda s: ((s.x, {"H": 1}, {"H": 2}), {}),
    "dynamic_update_slice": lambda s: ((s.x, s.x[{"H": nx.ds(0, 1)}], {"H": 1}), {}),
    "einsum": lambda s: (("i{A}->{A}", s.xp), {}),
    "empty": lambda s: (({"A": 2},), {}),
    "expand_dims": lambda s: ((s.xp, 0), {}),
    "extract": lambda s: ((jnp.array([True, False, True]), s.xn), {}),
    "eye": lambda s: ((3,), {}),
    "fill_diagonal": lambda s: ((s.m, 0.0), {"inplace": False}),
    "fix_canonical_order": lambda s: ((["A", "H"],), {}),
    "flatnonzero": lambda s: ((s.xn,), {}),
    "flatten": lambda s: ((s.x, ["A", "H"], "AH"), {}),
    "from_process_local": lambda s: ((s.xp,), {}),
    "from_xarray": lambda s: ((s.xp,), {}),
    "full": lambda s: (({"A": 2}, 1.0), {}),
    "gcd": lambda s: ((s.xi, s.xi), {}),
    "grad": lambda s: ((jnp.sin,), {}),
    "hamming": lambda s: ((3,), {}),
    "hanning": lambda s: ((3,), {}),
    "hsplit": lambda s: ((s.xp, 3), {}),
    "identity": lambda s: ((3,), {}),
    "insert": lambda s: ((s.xp, 1, 0.0), {}),
    "intersect1d": lambda s: ((s.xn, s.xn), {}),
    "jit": lambda s: ((_identity,), {}),
    "kaiser": lambda s: ((3, 1.0), {}),
    "lcm": lambda s: ((s.xi, s.xi), {}),
    "ldexp": lambda s: ((s.xp, s.xi), {}),
    "load_safetensors": lambda s: (("missing.safetensors",), {}),
    "map": lambda s: ((_identity, s.x, "A"), {}),
    "moveaxis": lambda s: ((s.m, 0, 1), {}),
    "nanpercentile": lambda s: ((s.xp, 50.0), {}),
    "nanquantile": lambda s: ((s.xp, 0.5), {}),
    "nmap": lambda s: ((jnp.sin,), {}),
    "nonzero": lambda s: ((s.x,), {"axis_name": "nz", "size": 6}),
    "ones": lambda s: (({"A": 2},), {}),
    "pad": lambda s: ((s.xp, 1), {}),
    "partition": lambda s: ((s.xp, 1), {}),
    "pdot": lambda s: ((s.x, s.x, "A"), {}),
    "percentile": lambda s: ((s.xp, 50.0), {}),
    "permute_dims": lambda s: ((s.m, (1, 0)), {}),
    "piecewise": lambda s: ((s.xp, [s.mask], [1.0, 0.0]), {}),
    "place": lambda s: ((s.xp, s.mask, 0.0), {"inplace": False}),
    "pmax": lambda s: ((s.xp, "A"), {}),
    "pmean": lambda s: ((s.xp, "A"), {}),
    "pmin": lambda s: ((s.xp, "A"), {}),
    "polyfit": lambda s: ((s.plain, s.xp, 1), {}),
    "ppermute": lambda s: ((s.xp, "A", [(0, 1), (1, 0)]), {}),
    "pshuffle": lambda s: ((s.xp, "A", [1, 0]), {}),
    "psum": lambda s: ((s.xp, "A"), {}),
    "psum_scatter": lambda s: ((s.m4, "A"), {}),
    "put": lambda s: ((s.xp, 0, 1.0), {"inplace": False}),
    "put_along_axis": lambda s: ((s.xp, jnp.zeros(1, int), 1.0, 0), {"inplace": False}),
    "quantile": lambda s: ((s.xp, 0.5), {}),
    "ravel_multi_index": lambda s: (((s.xi, s.xi), (6, 6)), {"mode": "clip"}),
    "rearrange": lambda s: ((s.x, "{A H} -> {H A}"), {}),
    "rename": lambda s: ((s.x, {"A": "B"}), {}),
    "repeat": lambda s: ((s.xp, 2), {}),
    "reshape": lambda s: ((s.xp, (3, 1)), {}),
    "resize": lambda s: ((s.xp, (3, 1)), {}),
    "restore_checkpoint": lambda s: ((None, "missing", {}), {}),
    "rollaxis": lambda s: ((s.m, 1), {}),
    "pipeline": lambda s: ((lambda p, v: v + p, nx.wrap(jnp.ones((2, 3)), ["layer", "H"]),
                            nx.wrap(jnp.ones((4, 3)), ["batch", "H"])), {"axis": "layer", "microbatches": 2}),
    "plan_sharding": lambda s: ((lambda v: v * 2, s.x), {"candidates": [{}]}),
    "save_safetensors": lambda s: (({"w": s.x}, "out.safetensors"), {}),
    "to_xarray": lambda s: ((s.x,), {}),
    "scan": lambda s: ((_step, 0.0, s.time), {}),
    "searchsorted": lambda s: ((s.plain, s.xp), {}),
    "select": lambda s: (([s.mask], [s.xp]), {}),
    "serial_loop": lambda s: (("loop", 2), {}),
    "setdiff1d": lambda s: ((s.xn, s.xn), {}),
    "setxor1d": lambda s: ((s.xn, s.xn), {}),
    "shard": lambda s: ((s.xp,), {}),
    "shard_map": lambda s: ((_identity,), {}),
    "visualize_pipeline": lambda s: ((2, 4), {}),
    "sharding": lambda s: ((s.xp,), {}),
    "split": lambda s: ((s.xp, 3), {}),
    "swapaxes": lambda s: ((s.m, 0, 1), {}),
    "take": lambda s: ((s.xp, 0), {}),
    "tree_map": lambda s: ((_identity, s.x), {}),
    "take_along_axis": lambda s: ((s.xp, jnp.zeros(1, int)), {"axis": 0}),
    "tile": lambda s: ((s.xp, 2), {}),
    "tri": lambda s: ((3,), {}),
    "trim_zeros": lambda s: ((s.xn,), {}),
    "unbind": lambda s: ((s.x, "A"), {}),
    "unflatten": lambda s: ((s.x, "H", {"H1": 1, "H2": 3}), {}),
    "union1d": lambda s: ((s.xn, s.xn), {}),
    "unique": lambda s: ((s.xn,), {}),
    "unique_all": lambda s: ((s.xn,), {}),
    "unique_counts": lambda s: ((s.xn,), {}),
    "unique_inverse": lambda s: ((s.xn,), {}),
    "unique_values": lambda s: ((s.xn,), {}),
    "unpackbits": lambda s: ((s.xu8,), {}),
    "unwrap": lambda s: ((s.x, ["A", "H"]), {}),
    "value_and_grad": lambda s: ((jnp.sin,), {}),
    "vectorize": lambda s: ((jnp.sin,), {}),
    "visualize_sharding": lambda s: ((s.xp,), {}),
    "vsplit": lambda s: ((s.m, 3), {}),
    "where": lambda s: ((s.mask, s.xp, 0.0), {}),
    "xmap": lambda s: ((_identity, ["A", ...], ["A", ...]), {}),
    "broadcast_to": lambda s: ((s.xp, (2, 3)), {}),
    "concat": lambda s: (([s.xp, s.xp],), {}),
    "concatenate": lambda s: (([s.xp, s.xp],), {}),
    "diag_indices_from": lambda s: ((s.m,), {}),
    "tril_indices_from": lambda s: ((s.m,), {}),
    "triu_indices_from": lambda s: ((s.m,), {}),
    "fliplr": lambda s: ((s.m,), {}),
    "tril": lambda s: ((s.m,), {}),
    "triu": lambda s: ((s.m,), {}),
    "diagonal": lambda s: ((s.m,), {}),
    "matrix_transpose": lambda s: ((s.m,), {}),
    "rot90": lambda s: ((s.m,), {}),
    "trace": lambda s: ((s.m,), {}),
    "histogramdd": lambda s: ((s.m,), {}),
    "matvec": lambda s: ((s.m, s.xp), {}),
    "vecmat": lambda s: ((s.xp, s.m), {}),
    "roots": lambda s: ((s.xp,), {"strip_zeros": False}),
    "tag": lambda s: ((s.xp, "B"), {}),
    "tensordot": lambda s: ((s.m, s.m), {}),
    "stack": lambda s: (([s.xp, s.xp],), {}),
    "zeros": lambda s: (({"A": 2},), {}),
}
# integer-only functions: integer operands
for _name in """bitwise_and bitwise_count bitwise_invert bitwise_left_shift bitwise_not bitwise_or
        bitwise_right_shift bitwise_xor invert left_shift right_shift packbits""".split():
    GOOD[_name] = (lambda s, k=1 if _name in mirror.UNARY or _name == "packbits" else 2: ((s.xi,) * k, {}))

# nx.nn and nx.random: a good call where a key, a rate or several operands come first
GOOD_NN = {
    "dot_product_attention": lambda s: ((s.qkv, s.qkv, s.qkv), {"seq_axis": "T", "head_axis": "D"}),
    "dropout": lambda s: ((s.key, 0.5, s.x), {}),
    "glu": lambda s: ((s.x, "A"), {}),
    "layer_norm": lambda s: ((s.x, "H"), {}),
    "one_hot": lambda s: ((s.xi, 4), {"axis": "C"}),
    "rms_norm": lambda s: ((s.x, "H"), {}),
}
GOOD_RANDOM = {
    "beta": lambda s: ((s.key, 2.0, 3.0), {}),
    "categorical": lambda s: ((s.key, s.xp), {}),
    "fold_in": lambda s: ((s.key, 1), {}),
    "gamma": lambda s: ((s.key, 2.0), {}),
    "key_data": lambda s: ((s.key,), {}),
    "permutation": lambda s: ((s.key, s.xp), {}),
    "poisson": lambda s: ((s.key, 3.0), {}),
    "randint": lambda s: ((s.key, (2,), 0, 5), {}),
    "truncated_normal": lambda s: ((s.key, -1.0, 1.0), {}),
    "wrap_key_data": lambda s: ((jax.random.key_data(s.key),), {}),
}

# Not swept: (space, name) -> why.
SKIP = {
    ("nx", "clear_caches"): "takes no arguments",
    ("nx", "reset_canonical_orders"): "takes no arguments",
    ("nx", "current_mesh"): "takes no arguments",
    ("nx", "mesh_shape"): "takes no arguments",
    ("nx", "Plan"): "nx.plan_sharding's result, not built by hand",
    ("nx", "PlanRow"): "a row of nx.plan_sharding's result, not built by hand",
    **{("nx", n): "jax.numpy's own object, re-exported unchanged (not an array function)"
       for n in mirror.PASSTHROUGH},
}
# Not swept at one position: (space, name, position) -> why.
SKIP_AT = {
    ("nx", "restore_checkpoint", 1): "the path is the checkpointer's to read (nx passes it on untouched)",
}
# Whose good call needs more than a value (a file, a checkpoint, an optional library): not run alone.
NO_GOOD_CALL = {("nx", "from_xarray"), ("nx", "load_safetensors"), ("nx", "restore_checkpoint")}


def _is_swept(obj) -> bool:
    if isinstance(obj, types.ModuleType) or not callable(obj):
        return False
    if isinstance(obj, type):  # nx's classes; jax.numpy's dtypes are re-exported unchanged
        return obj.__module__.startswith("namedarray")
    return True


def _positional_count(f) -> float:
    """How many positional arguments ``f`` takes (``inf`` with ``*args``; 2 when its signature is unknown)."""
    nin = getattr(getattr(jnp, getattr(f, "__name__", ""), None), "nin", None)
    if isinstance(nin, int):  # a ufunc: its signature is (*args, out=None, where=None)
        return nin
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return math.inf
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _param_name(f, pos: int) -> str | None:
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return None
    if pos < len(params) and params[pos].kind is not params[pos].VAR_POSITIONAL:
        return params[pos].name
    return None


def good_call(space: str, name: str) -> tuple[tuple, dict]:
    """(arguments, keywords) of a call of ``space.name`` that succeeds."""
    f = getattr(SPACES[space], name)
    table = {"nx": GOOD, "nn": GOOD_NN, "random": GOOD_RANDOM}[space]
    s = samples()
    if name in table:
        return table[name](s)
    if space == "random":
        return (s.key,), {}
    if name in mirror.BINARY or name in ("pow", "power"):
        return (s.xp, s.xp), {}
    try:
        need = sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                   for p in inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        need = 1
    return (s.xp,) * max(need, 1), {}


def _skipped(space: str, name: str, obj) -> bool:
    if (space, name) in SKIP or not _is_swept(obj):
        return True
    return obj is getattr(JAX[space], name, None)  # jax's own function, re-exported unchanged


def _swept() -> list[tuple[str, str]]:
    return [(space, name) for space, module in SPACES.items() for name in sorted(module.__all__)
            if not _skipped(space, name, getattr(module, name))]


def _cases():
    out = []
    for space, name in _swept():
        obj = getattr(SPACES[space], name)
        for pos in (0, 1) if _positional_count(obj) >= 2 else (0,):
            if (space, name, pos) in SKIP_AT:
                continue
            for label in BAD:
                out.append(pytest.param(space, name, pos, label, id=f"{space}.{name}-{pos}-{label}"))
    return out


def why_not(e: BaseException, space: str, name: str, pos: int, args: tuple, kwargs: dict) -> str | None:
    """Why ``e`` is not an acceptable answer to a wrong value at position ``pos`` (None when it is)."""
    if isinstance(e, NamedAxisError):
        return None
    f = getattr(SPACES[space], name)
    msg = str(e)
    generic = next((g for g in GENERIC if re.search(g, msg)), None)
    if generic:
        return f"{type(e).__name__} in a generic wording ({generic!r})"
    if type(e) in (TypeError, NotImplementedError):
        param = _param_name(f, pos)
        named = [rf"\b{re.escape(name)}\b", rf"argument {pos}\b", rf"position {pos}\b"]
        if param:
            named.append(rf"\b{re.escape(param)}\b")
        if not any(re.search(p, msg) for p in named):
            return f"{type(e).__name__} naming neither the function nor the argument"
        return None
    if type(e) is ValueError:
        where = "nx." + ("" if space == "nx" else space + ".") + name
        if msg.startswith(f"{where}: "):
            return None  # nx's own check of a value
        return _unlike_jax(msg, space, name, args, kwargs)
    if type(e) is FileNotFoundError and isinstance(args[pos], str):
        return None
    return type(e).__name__


def _unlike_jax(msg: str, space: str, name: str, args: tuple, kwargs: dict) -> str | None:
    """Why a ValueError with message ``msg`` is not the one jax raises for the same call (None when it is)."""
    ref_f = getattr(JAX[space], name, None)
    if ref_f is None:
        return "ValueError with no jax function to compare with"
    try:
        params = inspect.signature(ref_f).parameters
    except (TypeError, ValueError):
        params = kwargs
    try:
        ref_f(*map(_plain, args), **{k: _plain(v) for k, v in kwargs.items() if k in params})
    except ValueError as ref:
        if str(ref).split("\n")[0][:40] in msg:
            return None
        return f"ValueError unlike jax's ({ref})"
    except Exception as ref:  # noqa: BLE001
        return f"ValueError where jax raises {type(ref).__name__} ({ref})"
    return "ValueError where jax succeeds"


def _plain(v):
    """What a lifted function sees of ``v``: its positional part at index 0 of every named axis."""
    if isinstance(v, (list, tuple)):
        return type(v)(map(_plain, v))
    if type(v) is nx.NamedArray:
        p = v.ndim
        data = nx.unwrap(v, {p + i: n for i, n in enumerate(v.names)})
        return data[(..., *([0] * len(v.names)))]
    return v


def _call(f, args: tuple, kwargs: dict) -> None:
    """``f(*args, **kwargs)``, traced first (nothing compiles, so a call that succeeds costs little); a call
    that fails there runs again eagerly, and its eager error is the one raised (and judged)."""
    def run():
        out = f(*args, **kwargs)
        if hasattr(out, "__enter__") and hasattr(out, "__exit__"):  # a context manager checks on entry
            with out:
                pass
        return ()

    try:
        jax.make_jaxpr(run)()
    except Exception:  # noqa: BLE001
        nx.reset_canonical_orders()
        run()


@pytest.fixture(autouse=True, scope="module")
def _sweep_setting(tmp_path_factory):
    """In a directory of its own (a string argument may be taken as a file name: nx.save_safetensors), and
    with jax's traceback filtering off: jax filters the traceback of every error that leaves it, checking
    each frame's file on disk, which is most of the time of a sweep of errors (the errors are the same)."""
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("sweep"))
    before = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", "off")
    yield
    jax.config.update("jax_traceback_filtering", before)
    os.chdir(cwd)


@pytest.mark.parametrize("space,name", [pytest.param(sp, n, id=f"{sp}.{n}") for sp, n in _swept()
                                        if (sp, n) not in NO_GOOD_CALL])
def test_good_call(space, name):
    """Each good call the sweep starts from succeeds (or, without a mesh, says that one is needed)."""
    args, kwargs = good_call(space, name)
    try:
        _call(getattr(SPACES[space], name), args, kwargs)
    except nx.errors.MissingResourceError:
        pass  # nx.sharding & co. need a mesh; they say so
    except nx.errors.UnboundAxisError:
        pass  # collectives over a name no nx.xmap binds (and the value lacks)


@pytest.mark.parametrize("space,name,pos,label", _cases())
def test_wrong_value(space, name, pos, label):
    f = getattr(SPACES[space], name)
    args, kwargs = good_call(space, name)
    args = list(args)
    bad = BAD[label]
    if pos < len(args):
        args[pos] = bad
    else:
        args.append(bad)
    try:
        _call(f, tuple(args), kwargs)
    except Exception as e:  # noqa: BLE001
        why = why_not(e, space, name, pos, tuple(args), kwargs)
        assert why is None, f"{space}.{name}(argument {pos} = {bad!r}): {why}: {type(e).__name__}: {e}"


def test_sweep_covers_the_public_surface():
    """Every public function is swept or skipped with a reason; the tables name only public functions."""
    swept = set(_swept())
    assert len(swept) > 400
    for space, name in [*SKIP, *((sp, n) for sp, n, _ in SKIP_AT), *NO_GOOD_CALL]:
        assert name in SPACES[space].__all__, (space, name)
    for table, space in ((GOOD, "nx"), (GOOD_NN, "nn"), (GOOD_RANDOM, "random")):
        for name in table:
            assert (space, name) in swept, (space, name)


# --------------------------------------------------------------------------------------------------------
# The failures that started the sweep, one by one: the class, and a message naming the function and argument


@pytest.fixture
def x():
    return nx.wrap(jnp.arange(6.0).reshape(2, 3), ["A", "H"])


def test_tag_of_a_list_of_names():
    with pytest.raises(TypeError, match=r"^nx.tag: x must be an array or scalar, got \['a', 'b'\] \(list\); "
                                        r"the names come after the array: nx.tag\(x, 'a', 'b'\)"):
        nx.tag(["a", "b"])


def test_unbind_none(x):
    with pytest.raises(TypeError, match=r"^nx.unbind: axis must be one axis: an axis name or a positional "
                                        r"axis \(int\), got None$"):
        nx.unbind(x, None)


@pytest.mark.parametrize("f", [nx.fix_canonical_order, nx.canonical_order])
def test_canonical_order_of_none(f):
    with pytest.raises(TypeError, match=rf"^nx.{f.__name__}: .* must be a sequence of axis names, got None$"):
        f(None)


def test_fix_canonical_order_of_a_set():
    with pytest.raises(TypeError, match=r"nx.fix_canonical_order: argument 0 must be a sequence of axis "
                                        r"names in the order to fix \(a set has none\)"):
        nx.fix_canonical_order({"a", "b"})


@pytest.mark.parametrize("f", [nx.concat, nx.concatenate, nx.stack])
@pytest.mark.parametrize("bad", [None, 3.0, "ab", {"a"}])
def test_join_of_no_sequence(f, bad):
    with pytest.raises(TypeError, match=rf"^nx.{f.__name__}: arrays must be a sequence of arrays, got "):
        f(bad)


def test_join_of_a_sequence_holding_none(x):
    with pytest.raises(TypeError, match=r"^nx.concatenate: arrays\[1\] must be an array or scalar, got "
                                        r"None$"):
        nx.concatenate([x, None], axis="A")


def test_size_of_an_axis_out_of_range(x):
    message = r"^nx.size: positional axis -5 is out of bounds for a value with 0 positional axes "
    with pytest.raises(nx.errors.AxisSpecError, match=message + r"\(shape \(\), named axes 'A', 'H'"):
        nx.size(x, axis=-5)


@pytest.mark.parametrize("axis", ["zz", {"a"}, 1.5])
def test_size_of_a_wrong_axis(x, axis):
    with pytest.raises(NamedAxisError, match=r"^nx.size: "):
        nx.size(nx.wrap(jnp.ones((2, 3)), ["A", ...]), axis=axis)


def test_size_by_position_still_counts_positional_axes():
    y = nx.wrap(jnp.ones((2, 3, 4)), ["A", ...])
    assert nx.size(y) == 12 and nx.size(y, 1) == 4 and nx.size(y, (0, -1)) == 12
    assert nx.size(jnp.ones((2, 5)), 1) == 5


def test_elementwise_operand_of_the_wrong_kind(x):
    with pytest.raises(TypeError, match=r"^nx.add: argument 1 must be an array or scalar, got the string "
                                        r"'zz'$"):
        nx.add(x, "zz")
    with pytest.raises(TypeError, match=r"^nx.sin: argument 0 must be an array or scalar, got \{'a'\} "
                                        r"\(set\)$"):
        nx.sin({"a"})


def test_elementwise_list_of_the_wrong_length_names_the_positional_shapes():
    xp = nx.wrap(jnp.ones((2, 3)), ["A", ...])
    with pytest.raises(nx.errors.AxisSizeError, match=r"^nx.add: the positional shapes do not broadcast "
                                                      r"\(argument 0: shape \(3,\) with named axes 'A', "
                                                      r"argument 1: shape \(2,\)\)"):
        nx.add(xp, [1, 2])


def test_lifted_option_of_the_wrong_kind():
    xp = nx.wrap(jnp.ones((2, 3)), ["A", ...])
    with pytest.raises(TypeError, match=r"^nx.polyder: m must be an int, got the string 'zz'$"):
        nx.polyder(xp, "zz")
    with pytest.raises(TypeError, match=r"^nx.round: decimals must be an int, got None$"):
        nx.round(xp, None)


def test_lifted_scalar_where_an_axis_is_needed():
    with pytest.raises(nx.errors.PositionalAxisError, match=r"^nx.polyadd: it acts on 1 axis of the argument "
                                                            r"'a1', which has none \(got nan \(float\)\)"):
        nx.polyadd(float("nan"), jnp.ones(3))


def test_reduction_of_a_string():
    with pytest.raises(TypeError, match=r"^nx.sum: a must be an array or scalar, got the string 'zz'$"):
        nx.sum("zz")


def test_creation_dtype_of_the_wrong_kind():
    with pytest.raises(TypeError, match=r"^nx.zeros: dtype must be a dtype or None, got the string 'zz'$"):
        nx.zeros({"A": 2}, "zz")


def test_transform_of_a_non_function():
    with pytest.raises(TypeError, match=r"^nx.scan: f must be a function"):
        nx.scan(None, 0.0, nx.wrap(jnp.ones(3), ["time"]))
    with pytest.raises(TypeError, match=r"^nx.grad: argnums must be an int or a tuple of ints"):
        nx.grad(jnp.sin, "zz")


def test_collective_of_a_string():
    with pytest.raises(TypeError, match=r"^nx.psum: x must be an array or scalar, got the string 'zz'$"):
        nx.psum("zz", "A")
    message = r"^nx.psum: axis_name must be an axis name, a positional int, or a tuple of them, got "
    with pytest.raises(nx.errors.AxisSpecError, match=message + r"\{'a'\} \(set\)"):
        nx.psum(nx.wrap(jnp.ones(2), ["A"]), {"a"})


def test_named_shape_of_the_wrong_kind():
    with pytest.raises(TypeError, match=r"^nx.NamedShape: items must be a mapping \{name: size\} or a "
                                        r"sequence of \(name, size\) pairs, got None$"):
        nx.NamedShape(None)


def test_checkpointer_of_the_wrong_kind():
    with pytest.raises(TypeError, match=r"^nx.restore_checkpoint: checkpointer must be a checkpointer with "
                                        r"metadata\(path\) and restore\(path, target\)"):
        nx.restore_checkpoint(None, "path", {})


def test_random_shape_of_the_wrong_kind():
    with pytest.raises(TypeError, match=r"^nx.random.normal: shape must be a sequence of ints"):
        nx.random.normal(jax.random.key(0), "zz")
