"""Load a kernel saved by :func:`twill.codegen.gluon.generate` with only torch and Triton (no twill).

This file imports nothing from twill, so a GPU machine can import it by path::

    spec = importlib.util.spec_from_file_location("gluon_loader", "twill/codegen/gluon/loader.py")
    ...; kernel = module.load("benchmarks/gluon_kernels/gemm")
    kernel[grid](a_desc, b_desc, c_desc, K)

The kernel takes the original ``@triton.jit`` function's arguments in order (constexprs may be left out;
given ones must equal the generated values). A tensor-descriptor argument may be a
``triton.tools.tensor_descriptor.TensorDescriptor`` (or any object with ``base``, ``shape``, ``strides`` and
``block_shape``): it is rebuilt as a Gluon descriptor with the shared layout the kernel was compiled for.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["GluonLauncher", "load"]


class GluonLauncher:
    """``launcher[grid](*args)`` runs the generated kernel."""

    def __init__(self, folder: Path, manifest: dict[str, Any], fn: Any) -> None:
        self.folder, self.manifest, self.fn = folder, manifest, fn

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            return self.fn[grid](*self.arguments(args, kwargs), num_warps=self.manifest["num_warps"])
        return run

    def bind(self, grid: Any, *args: Any, **kwargs: Any) -> Any:
        """A zero-argument launch with the arguments converted once (for timing loops)."""
        converted = self.arguments(args, kwargs)
        warps = self.manifest["num_warps"]
        return lambda: self.fn[grid](*converted, num_warps=warps)

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The kernel's arguments in order, descriptors rebuilt with their shared layouts."""
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        names = self.manifest["arg_names"]
        consts = self.manifest["constexprs"]
        given = dict(zip(names[:len(args)], args, strict=True))
        given.update(kwargs)
        for name, value in consts.items():
            if name in given and given[name] != value:
                raise ValueError(f"{name}={given[name]!r}, but the kernel was generated for {value!r}")
        out = []
        for name in names:
            if name in consts:
                if name in given and given[name] != consts[name]:
                    raise ValueError(f"{name}={given[name]!r}, but the kernel was generated for "
                                     f"{consts[name]!r}")
                out.append(consts[name])
                continue
            if name not in given:
                raise TypeError(f"missing argument {name!r}")
            value = given[name]
            desc = self.manifest["descriptors"].get(name)
            if desc is not None:
                dtype = {"f16": gl.float16, "bf16": gl.bfloat16, "f32": gl.float32}[desc["dtype"]]
                layout = gl.NVMMASharedLayout.get_default_for(desc["block_shape"], dtype)
                if list(value.block_shape) != desc["block_shape"]:
                    raise ValueError(f"{name} has block {list(value.block_shape)}, the kernel loads "
                                     f"{desc['block_shape']}")
                value = TensorDescriptor(value.base, list(value.shape), list(value.strides),
                                         list(value.block_shape), layout)
            out.append(value)
        return out


def load(folder: str | Path) -> GluonLauncher:
    """The saved kernel in ``folder`` (``manifest.json`` + ``kernel.py``)."""
    folder = Path(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    if manifest.get("kind") != "twill.gluon_kernel":
        raise ValueError(f"{folder} does not hold a twill Gluon kernel (manifest kind "
                         f"{manifest.get('kind')!r})")
    name = f"twill_gluon_{manifest['kernel']}_{abs(hash(str(folder.resolve()))) % 10**8}"
    spec = importlib.util.spec_from_file_location(name, folder / manifest["source"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return GluonLauncher(folder, manifest, getattr(module, manifest["kernel"]))
