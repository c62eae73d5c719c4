"""Load an xmap-era program of this folder with its ``jax.experimental.maps`` import line replaced.

>>> lm = load("sharded_lm", "namedarray.maps")  # doctest: +SKIP
"""

import pathlib
import sys
import types

HERE = pathlib.Path(__file__).resolve().parent
LINE = "from jax.experimental.maps import"


def load(name: str, maps_module: str, tag: str = "ported") -> types.ModuleType:
    """The program ``name``, its one ``from jax.experimental.maps import ...`` line now importing from
    ``maps_module``; nothing else changed."""
    path = HERE / f"{name}.py"
    source = path.read_text()
    assert source.count(LINE) == 1, f"{name}.py must import from jax.experimental.maps exactly once"
    module = types.ModuleType(f"{tag}_{name}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # haiku and dataclasses look modules up by name
    exec(compile(source.replace(LINE, f"from {maps_module} import"), str(path), "exec"), module.__dict__)
    return module
