"""help() answers how names are treated: the first paragraph of every nx function's docstring says it, and
the public modules list only their public names."""

import pydoc
import types

import jax
import jax.numpy as jnp
import pytest

import namedarray as nx
from namedarray.engine.docstrings import RULES
from namedarray.ops.mirror import FUNCTIONS


def first_paragraph(f) -> str:
    return (f.__doc__ or "").split("\n\n")[0].replace("\n", " ")


@pytest.mark.parametrize("where,rule,jax_home", [
    ("sum", "reduction", "jax.numpy"), ("exp", "elementwise", "jax.numpy"),
    ("add", "elementwise", "jax.numpy"), ("argmax", "single", "jax.numpy"), ("cumsum", "along", "jax.numpy"),
    ("linalg.det", "lifted", "jax.numpy"), ("unique", "positional", "jax.numpy"),
    ("fft.fft", "lifted", "jax.numpy"), ("lax.cumsum", "lifted", "jax"),
])
def test_help_starts_with_the_rule_for_names(where, rule, jax_home):
    f = nx
    for part in where.split("."):
        f = getattr(f, part)
    doc = f.__doc__
    assert doc.startswith(f"``nx.{where}`` ")
    assert first_paragraph(f).endswith(RULES[rule].replace("\n", " "))
    assert f"The documentation of ``{jax_home}.{where}`` follows." in doc  # jax's own text follows
    text = pydoc.render_doc(f, renderer=pydoc.plaintext)
    assert RULES[rule].splitlines()[0] in text[:2000]  # what help() prints first


def test_every_mirrored_function_says_what_it_does_with_names():
    for name, f in FUNCTIONS.items():
        if isinstance(f, (type, types.ModuleType)) or not callable(f) or f is getattr(jnp, name, None):
            continue  # dtypes, constants and passthroughs are jax's own
        doc = f.__doc__ or ""
        rules = [r.replace("\n", " ") for r in RULES.values()]
        stated = any(first_paragraph(f).endswith(r) for r in rules) or name in ("shape", "ndim", "size")
        assert stated, f"nx.{name}: {doc[:120]!r}"


def test_einsum_help_holds_its_grammar():
    doc = nx.einsum.__doc__
    assert doc.startswith("Einstein summation where letters are positional axes and ``{names}`` are named "
                          "axes")
    for piece in ("Grammar", "{name,name,...}", "broadcast by name", "->"):
        assert piece in doc


def test_public_modules_list_only_their_public_names():
    internal = {"jax", "np", "jnp", "functools", "math", "annotations", "Any", "Callable", "Mapping",
                "Sequence", "engine", "kernels", "layout", "placement", "wrapping", "mirror", "lifted"}
    for mod in (nx, nx.nn, nx.random, nx.lax):
        names = dir(mod)
        assert not internal & set(names), (mod.__name__, sorted(internal & set(names)))
        for n in names:
            getattr(mod, n)  # each listed name resolves
    public = {"sum", "einsum", "shard", "shard_map", "scan", "axis_rules", "NamedArray", "nn", "errors"}
    assert public <= set(dir(nx))
    assert {"softmax", "dot_product_attention", "layer_norm", "relu"} <= set(dir(nx.nn))
    assert {"normal", "split", "key"} <= set(dir(nx.random))
    assert set(nx.__all__) == set(dir(nx))


def test_grad_of_a_zero_d_named_loss():
    x = nx.wrap(jnp.arange(3.0), ["k"])
    g = nx.grad(lambda v: nx.sum(v * v, "k"))(x)
    assert g.named_shape == {"k": 3} and g.unwrap(["k"]).tolist() == [0.0, 2.0, 4.0]
    with pytest.raises(TypeError):
        jax.grad(lambda v: nx.sum(v * v, "k"))(x)  # jax's own refuses a NamedArray; nx.grad is the way
