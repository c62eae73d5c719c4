"""The API reference: which public name goes on which page, and the text of the pages.

The public API is ``nx.__all__`` (a public submodule counts by the names it exports), the methods and
properties of ``nx.NamedArray``, ``nx.nn``, ``nx.random`` and ``nx.errors``; nothing else is on the site.
Each name has one entry, under the name a user writes (``nx.sum``, ``nx.nn.relu``), on the page of what it
is for. Most of the NumPy mirror is placed by the rule its function follows (``__nx_rule__``: elementwise,
reduction, ...), so a function added to the mirror lands on a page without editing this file; every other
name is placed below by name, and :func:`placement` fails on a public name that has no page.

``docs/conf.py`` writes the pages (:func:`write`); ``tests/test_site.py`` checks what they hold.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import pathlib
import re
import sys
import types

import jax.numpy as jnp

import namedarray as nx

# the public submodules, by the name a user writes, and the module each is
SUBMODULES = {name: getattr(nx, name) for name in nx.__all__
              if isinstance(getattr(nx, name), types.ModuleType)}
SUBMODULES["nn.initializers"] = nx.nn.initializers


@dataclasses.dataclass(eq=False)
class Section:
    title: str
    names: list[str] = dataclasses.field(default_factory=list)  # nx.<name>
    rules: tuple[str, ...] = ()  # and the mirror's functions of these rules that no section names
    module: str | None = None  # or a public submodule: its docstring, then each name it exports
    text: str = ""


@dataclasses.dataclass(eq=False)
class Group:
    slug: str
    title: str
    intro: str
    sections: list[Section]


CREATION = """array asarray copy astype zeros_like ones_like full_like empty_like eye identity tri meshgrid
    vander""".split()
STRUCTURE = """reshape transpose permute_dims matrix_transpose moveaxis rollaxis swapaxes expand_dims squeeze
    ravel atleast_1d atleast_2d atleast_3d broadcast_arrays hstack vstack dstack column_stack block hsplit
    vsplit dsplit fliplr flipud rot90 resize insert delete diag diagflat diagonal trace tril triu""".split()
INDEXING = """take_along_axis put_along_axis put place choose select fill_diagonal diag_indices_from
    tril_indices_from triu_indices_from ravel_multi_index unravel_index searchsorted digitize""".split()

GROUPS = [
    Group("arrays", "Arrays and creation", (
        "A `NamedArray` is a jax array with some axes named: the named axes broadcast, reduce and contract "
        "by name, the other (positional) axes keep NumPy's rules. `nx.wrap` names the axes of an array, "
        "`nx.unwrap` gives a plain array back."), [
        Section("The named array", ["NamedArray", "NamedShape", "wrap", "unwrap", "rename", "is_named"]),
        Section("Creation", ["zeros", "ones", "full", "empty", "arange", "linspace", "logspace", "geomspace",
                             "broadcast_to", *CREATION]),
        Section("Pytrees of named arrays", ["tree_map", "tree_leaves"]),
        Section("Storage order and caches", ["canonical_order", "fix_canonical_order",
                                             "reset_canonical_orders", "clear_caches"]),
        Section("Type annotations: `nx.typing`", module="typing"),
    ]),
    Group("numpy", "Elementwise and the NumPy mirror", (
        "Every function of `jax.numpy` has an `nx.<f>` that takes NamedArrays. Each entry starts with what "
        "the function does with names; the rest of its behaviour is `jax.numpy`'s, linked from the entry. "
        "Reductions, contractions, joins and indexing have their own pages."), [
        Section("Elementwise", rules=("elementwise",)),
        Section("Along one axis", rules=("along",)),
        Section("Whole values", ["allclose", "array_equal", "array_equiv", "isin", "ndim", "shape", "size"]),
        Section("Lifted over names", rules=("lifted",)),
        Section("Positional only", rules=("positional",)),
        Section("Dtypes", rules=("dtype",)),
        Section("Linear algebra: `nx.linalg`", module="linalg"),
        Section("Fourier transforms: `nx.fft`", module="fft"),
        Section("As in `jax.numpy`", rules=("jax.numpy",), text=(
            "Dtypes, constants and helpers that hold no array: the `jax.numpy` objects themselves.")),
    ]),
    Group("reductions", "Reductions", (
        "A reduction takes its axes by position (int), by name (str) or both (`axis=(\"batch\", 0)`); the "
        "names it does not reduce are kept. `axis=None` reduces the positional axes only."), [
        Section("Over any axes", rules=("reduction",)),
        Section("Over one axis", rules=("single",)),
    ]),
    Group("contraction", "Contraction and einsum", (
        "Contractions sum over the names two values share; `nx.einsum` writes a contraction with names."), [
        Section("einsum", ["einsum"]),
        Section("Products", ["dot", "matmul", "tensordot", "inner", "outer", "vdot", "pdot"]),
    ]),
    Group("structure", "Structure", (
        "Naming, merging and splitting axes, and joining values: by name where a name is given. The "
        "positional reshapes of `jax.numpy` are lifted over names."), [
        Section("Naming axes", ["tag", "untag"]),
        Section("Merging and splitting axes", ["flatten", "unflatten", "rearrange", "split", "unbind"]),
        Section("Joining and padding", ["concatenate", "concat", "stack", "append", "pad", "tile"]),
        Section("Positional reshapes", STRUCTURE),
    ]),
    Group("indexing", "Indexing and updates", (
        "`x[{\"seq\": i}]` indexes by name, `x[0]` by position, and {py:attr}`x.at[...] <nx.NamedArray.at>` "
        "updates. The functions below select and update by name or position."), [
        Section("Selecting", ["where", "take", "nonzero", "argwhere"]),
        Section("Dynamic slices", ["ds", "dynamic_slice", "dynamic_update_slice"]),
        Section("Positional indexing", INDEXING),
    ]),
    Group("transforms", "Transforms: jit, grad, nmap and scan", (
        "`nx.jit`, `nx.grad` and `nx.value_and_grad` take and return NamedArrays. `nx.nmap` lifts a "
        "positional function over named axes, as `jax.vmap` would over each name; `nx.scan` and `nx.map` "
        "loop over a named axis."), [
        Section("Compiling and differentiating", ["jit", "grad", "value_and_grad"]),
        Section("Mapping over names", ["nmap", "along", "map", "scan"]),
    ]),
    Group("collectives", "Collectives and xmap", (
        "Collectives reduce and move data over a named axis bound by `nx.xmap` or `nx.shard_map`. `nx.xmap` "
        "runs a function with named axes over a mesh; `nx.maps` and `nx.lax` hold the names of "
        "`jax.experimental.maps` and `jax.lax` for xmap-era code."), [
        Section("Collectives", ["psum", "pmean", "pmax", "pmin", "all_gather", "all_to_all", "ppermute",
                                "pshuffle", "psum_scatter", "axis_index", "axis_size"]),
        Section("xmap", ["xmap", "serial_loop", "SerialLoop"]),
        Section("`nx.maps`", module="maps"),
        Section("`nx.lax`", module="lax"),
    ]),
    Group("sharding", "Sharding and planning", (
        "Values are laid out by name: rules map names to mesh axes (`nx.axis_rules`), `nx.shard` places a "
        "value by them, and `nx.plan_sharding` ranks rules for a step. The examples need several devices; "
        "on one machine, `JAX_NUM_CPU_DEVICES=8` simulates eight."), [
        Section("Laying values out", ["axis_rules", "shard", "sharding", "from_process_local", "current_mesh",
                                      "mesh_shape", "visualize_sharding"]),
        Section("shard_map", ["shard_map"]),
        Section("Planning", ["plan_sharding", "Plan", "PlanRow"]),
        Section("Pipelines", ["pipeline", "visualize_pipeline"]),
        Section("The axis environment: `nx.env`", module="env"),
    ]),
    Group("nn", "nx.nn", (
        "Activations, normalisations and attention, with names allowed wherever an `axis` is."), [
        Section("`nx.nn`", module="nn"),
        Section("`nx.nn.initializers`", module="nn.initializers"),
    ]),
    Group("random", "nx.random", "Samplers of `jax.random` with named axes.", [
        Section("`nx.random`", module="random"),
    ]),
    Group("interop", "Interop and checkpoints", (
        "NamedArrays to and from xarray and safetensors, and restored from checkpoints with their names."), [
        Section("xarray", ["to_xarray", "from_xarray"]),
        Section("Files and checkpoints", ["save_safetensors", "load_safetensors", "restore_checkpoint"]),
    ]),
    Group("errors", "Errors", (
        "Every error nx raises is an `nx.errors.NamedAxisError`, itself a `ValueError`."), [
        Section("`nx.errors`", module="errors"),
    ]),
]


def rule(name: str) -> str | None:
    """The rule an ``nx.<name>`` of the mirror follows, ``"jax.numpy"`` for jax.numpy's own object."""
    obj = getattr(nx, name)
    if getattr(jnp, name, None) is obj:
        return "jax.numpy"
    r = getattr(obj, "__nx_rule__", None)
    return r if r not in (None, "arguments") else None


@functools.cache
def placement() -> dict[str, tuple[Group, Section]]:
    """Where each name of ``nx.__all__`` is: named by a section, or by its rule, or a submodule's section."""
    where: dict[str, tuple[Group, Section]] = {}
    for group in GROUPS:
        for section in group.sections:
            for name in section.names:
                assert name in nx.__all__, f"nx.{name} is on the page {group.slug} but not public"
                assert name not in where, f"nx.{name} is on two pages"
                where[name] = (group, section)
            if section.module is not None and "." not in section.module:
                where[section.module] = (group, section)
    for group in GROUPS:
        for section in group.sections:
            for name in nx.__all__:
                if name not in where and section.rules and rule(name) in section.rules:
                    where[name] = (group, section)
    missing = sorted(set(nx.__all__) - set(where))
    assert not missing, f"public names on no page (place them in docs/api_pages.py): {missing}"
    return where


def exported(module: str) -> list[str]:
    mod = SUBMODULES[module]
    names = getattr(mod, "__all__", None)
    if names is None:
        names = sorted(n for n in dir(mod) if not n.startswith("_")
                       and not isinstance(getattr(mod, n), types.ModuleType))
    return list(names)


def section_names(group: Group, section: Section) -> list[str]:
    """The qualified names (``sum``, ``nn.relu``) a section documents, in order."""
    if section.module is not None:
        return [f"{section.module}.{n}" for n in exported(section.module)
                if not isinstance(getattr(SUBMODULES[section.module], n), types.ModuleType)]
    where = placement()
    ruled = sorted(n for n in nx.__all__ if n not in section.names and where[n][1] is section)
    return [*section.names, *ruled]


def resolve(qualname: str):
    """The object ``nx.<qualname>`` is."""
    head, _, last = qualname.rpartition(".")
    return getattr(SUBMODULES[head] if head else nx, last)


def alias_of(qualname: str) -> str | None:
    """The top-level ``nx.<name>`` that a submodule's name is the same object as (``maps.xmap``: ``xmap``)."""
    head, _, last = qualname.rpartition(".")
    if head and last in nx.__all__ and getattr(nx, last) is resolve(qualname):
        return last
    return None


def entries() -> list[tuple[Group, Section, str, str]]:
    """Every entry of the site: (group, section, qualified name, kind); the kinds are ``function``,
    ``class``, ``exception``, ``data`` (a value), ``jax`` (jax's or numpy's own object, re-exported) and
    ``alias`` (a submodule's name for a top-level function)."""
    out = []
    for group in GROUPS:
        for section in group.sections:
            for q in section_names(group, section):
                out.append((group, section, q, kind(q)))
    return out


def kind(qualname: str) -> str:
    obj = resolve(qualname)
    if alias_of(qualname):
        return "alias"
    if origin(qualname) is not None:
        return "jax"
    own = (getattr(obj, "__module__", "") or "").startswith("namedarray")
    if isinstance(obj, type) and own:
        return "exception" if issubclass(obj, BaseException) else "class"
    if callable(obj) and not isinstance(obj, type) and (own or hasattr(obj, "__nx_rule__")
                                                         or "." in qualname):
        return "function"
    return "data"


def origin(qualname: str) -> str | None:
    """The public name of the jax (or numpy, typing) object that ``nx.<qualname>`` is, where it is one."""
    import typing

    import jax
    import jax.sharding
    import numpy as np

    obj, last = resolve(qualname), qualname.rpartition(".")[2]
    if (getattr(obj, "__module__", "") or "").startswith("namedarray") or hasattr(obj, "__nx_rule__"):
        return None
    for home, mod in (("jax.numpy", jnp), ("jax.sharding", jax.sharding), ("jax", jax), ("numpy", np),
                      ("typing", typing)):
        if getattr(mod, last, None) is obj:
            return f"{home}.{last}"
    return None


def method_names() -> list[str]:
    """The public methods and properties of NamedArray, as the site lists them."""
    return sorted(n for n in dir(nx.NamedArray)
                  if not n.startswith("_") and n not in {"tree_flatten", "tree_unflatten"})


def _entry(qualname: str, k: str) -> list[str]:
    full = f"nx.{qualname}"
    if k == "alias":
        return [f".. py:data:: {full}", "", f"   The same function as :func:`nx.{alias_of(qualname)}`.", ""]
    if k == "jax":
        return [f".. py:data:: {full}", "", f"   ``{origin(qualname)}``, as it is.", ""]
    if k == "data":
        value = repr(resolve(qualname))
        value = value if len(value) < 80 and "\n" not in value else type(resolve(qualname)).__name__
        return [f".. py:data:: {full}", "", f"   ``{value}``", ""]
    if k == "class" and qualname == "NamedArray":
        return [f".. autoclass:: {full}", f"   :members: {', '.join(method_names())}", "   :undoc-members:",
                "   :member-order: alphabetical", ""]
    if k in ("class", "exception"):
        return [f".. auto{k}:: {full}", "   :members:", ""]
    return [f".. autofunction:: {full}", ""]


def page(group: Group) -> str:
    lines = [f"# {group.title}", "", group.intro, ""]
    for section in group.sections:
        lines += [f"## {section.title}", ""]
        if section.module is not None:
            lines += ["```{eval-rst}", f".. automodule:: nx.{section.module}", "```", ""]
        if section.text:
            lines += [section.text, ""]
        names = section_names(group, section)
        if names:  # entries are named in full (``nx.nn.relu``), outside the module an automodule opened
            lines += ["```{eval-rst}", ".. py:currentmodule:: None", ""]
            for q in names:
                lines += _entry(q, kind(q))
            lines += ["```", ""]
    return "\n".join(lines)


def index(groups: list[Group]) -> str:
    lines = ["# API reference", "", "`import namedarray as nx`: every public name, by what it is for.", ""]
    lines += [f"* [{g.title}]({g.slug}.md): {g.intro.split('. ')[0].rstrip('.')}." for g in groups]
    lines += ["", "```{toctree}", ":hidden:", ":maxdepth: 2", "", *[g.slug for g in groups], "```", ""]
    return "\n".join(lines)


def alias_modules() -> None:
    """Make ``nx`` (and ``nx.nn``, ...) importable names of the package, so that entries are ``nx.<name>``."""
    sys.modules.setdefault("nx", nx)
    for name, mod in SUBMODULES.items():
        sys.modules.setdefault(f"nx.{name}", mod)


def write(out: pathlib.Path, only: list[str] | None = None) -> list[str]:
    """Write the pages (those of the groups ``only`` names, or all) and their index into ``out``."""
    groups = [g for g in GROUPS if only is None or g.slug in only]
    unknown = set(only or ()) - {g.slug for g in GROUPS}
    assert not unknown, f"no API page {sorted(unknown)}; the pages are {[g.slug for g in GROUPS]}"
    for group in groups:
        (out / f"{group.slug}.md").write_text(page(group))
    (out / "index.md").write_text(index(groups))
    return [g.slug for g in groups]


def signature(obj, bound: bool) -> tuple[str, str] | None:
    """``obj``'s signature as ``inspect.signature`` gives it (what ``help()`` and the stubs show), as the text
    of its arguments and of its return annotation; ``bound`` drops a method's first argument."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if bound and params and params[0].name in ("self", "cls"):
        params = params[1:]
    params = [p.replace(annotation=_annotation(p.annotation), default=_default(p.default)) for p in params]
    ret = sig.return_annotation
    sig = sig.replace(parameters=params, return_annotation=inspect.Signature.empty)
    return str(sig), "" if ret is inspect.Signature.empty else repr(_annotation(ret))


class _Text:
    """An annotation or default that prints as its text (``inspect`` quotes a string annotation)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _annotation(annotation):
    if annotation is inspect.Parameter.empty:
        return annotation
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return _Text(_PRIVATE.sub(_public_home, _PREFIX.sub("", text)).replace("NoneType", "None"))


_PREFIX = re.compile(r"\b(?:typing|collections\.abc|builtins)\.")
_PRIVATE = re.compile(r"\bjax\._src(?:\.\w+)+")


def _public_home(m: re.Match) -> str:
    """A jax object written by its private module (``jax._src.lax.lax.Precision``) by its public name."""
    import importlib

    module, _, name = m[0].rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return name
    for home in ("jax.lax", "jax.sharding", "jax.numpy", "jax"):
        if getattr(importlib.import_module(home), name, None) is obj:
            return f"{home}.{name}"
    return name


def _default(value):
    if value is inspect.Parameter.empty:
        return value
    text = repr(value)
    return _Text("..." if text.startswith("<") or "\n" in text else text)
