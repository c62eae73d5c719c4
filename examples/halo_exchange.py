"""Halo exchange by name: a 2-D heat equation on an ``{x, y}`` grid split over ``x`` across 8 devices.

``nx.shard_map`` runs the stencil on each device's block of rows. A block needs one row beyond each of its
edges (its *halo*): the last row of the block above and the first row of the block below, which
``nx.ppermute(..., "x", shift=±1)`` brings from the neighbouring devices (periodic, as the grid is). The
result is compared after the given number of steps with

* the same stencil on the whole grid, written with ``nx.roll`` and run on one device, and
* the automatic version: that whole-grid stencil under ``jax.jit``, the grid laid out by ``.shard()``.

It also prints what the compiled halo version communicates (collective-permutes, no all-gather) and the
block each device holds. Run: ``python examples/halo_exchange.py`` (``--fast`` for a small grid).
"""

from __future__ import annotations

import re
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import namedarray as nx  # noqa: E402

ALPHA = 0.2  # the diffusion number (stable below 0.25)


def initial_grid(rows: int, cols: int) -> nx.NamedArray:
    """A hot square in a cold plate."""
    u: np.ndarray = np.zeros((rows, cols), np.float32)
    u[rows // 4: rows // 2, cols // 4: cols // 2] = 1.0
    return nx.wrap(jnp.asarray(u), ["x", "y"])


def whole_grid_step(u):
    """One explicit step on the whole grid: the 5-point Laplacian by rolling along each name (periodic)."""
    neighbours = (nx.roll(u, 1, axis="x") + nx.roll(u, -1, axis="x")
                  + nx.roll(u, 1, axis="y") + nx.roll(u, -1, axis="y"))
    return u + ALPHA * (neighbours - 4 * u)


def block_step(u):
    """The same step on one device's block of rows, with one-row halos from the neighbouring blocks."""
    above = nx.ppermute(u[{"x": slice(-1, None)}], "x", shift=1)  # the block above sends its last row down
    below = nx.ppermute(u[{"x": slice(0, 1)}], "x", shift=-1)  # the block below sends its first row up
    padded = nx.concatenate([above, u, below], axis="x")  # the block with its halos
    neighbours = (padded[{"x": slice(0, -2)}] + padded[{"x": slice(2, None)}]
                  + nx.roll(u, 1, axis="y") + nx.roll(u, -1, axis="y"))  # 'y' is whole in every block
    return u + ALPHA * (neighbours - 4 * u)


def collective_counts(hlo: str) -> dict[str, int]:
    return {op: len(re.findall(rf"=\s*\S+\s+{op}(?:-start)?\(", hlo))
            for op in ("collective-permute", "all-gather")}


def run(steps: int, size: tuple[int, int]) -> dict:
    u0 = initial_grid(*size)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))

    # one device, the whole grid
    reference = jax.jit(lambda u: nx.lax.fori_loop(0, steps, lambda i, v: whole_grid_step(v), u))(u0)

    with jax.set_mesh(mesh), nx.axis_rules({"x": "data"}):
        # per-device blocks, halos exchanged by nx.ppermute
        halo = jax.jit(nx.shard_map(lambda u: nx.lax.fori_loop(0, steps, lambda i, v: block_step(v), u)))
        blocks = halo(u0)
        hlo = halo.lower(u0).compile().as_text()
        assert hlo is not None
        # automatic: the whole-grid program with the grid laid out by its names; the compiler finds the halos
        def automatic_steps(u):
            return nx.lax.fori_loop(0, steps, lambda i, v: whole_grid_step(v).shard(), u.shard())

        auto = jax.jit(automatic_steps)
        automatic = auto(u0)

    def grid(v):
        return np.asarray(v.unwrap(["x", "y"]))

    return {"reference": grid(reference), "halo": grid(blocks), "automatic": grid(automatic),
            "ops": collective_counts(hlo), "block_shape": blocks.data.addressable_shards[0].data.shape,
            "layout": nx.visualize_sharding(blocks), "start": float(np.asarray(u0.unwrap(["x", "y"])).sum())}


def main(fast: bool = False) -> dict:
    steps, size = (50, (64, 32)) if fast else (500, (512, 256))
    print(f"2-D heat equation, {size[0]}x{size[1]} grid split over 'x' on 8 devices, {steps} steps")
    r = run(steps, size)
    print(r["layout"])
    for name in ("halo", "automatic"):
        err = float(np.max(np.abs(r[name] - r["reference"])))
        print(f"{name:>9} vs one device: max |difference| = {err:.2e}")
    print(f"heat is conserved: {r['start']:.4f} at the start, {r['halo'].sum():.4f} at the end")
    ops = r["ops"]
    print(f"the compiled halo version communicates with: collective-permute x{ops['collective-permute']}, "
          f"all-gather x{ops['all-gather']}")
    print(f"each device holds a {r['block_shape']} block of the {size} grid")
    return r


if __name__ == "__main__":
    main(fast="--fast" in sys.argv)
