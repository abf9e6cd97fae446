"""A compiled, twill-scheduled kernel that launches like the original ``@triton.jit`` function.

This module imports nothing from twill (only the standard library, and Triton when a kernel is loaded),
so a GPU machine without twill's solver dependencies can load an applied kernel saved on another
machine by importing this one file::

    spec = importlib.util.spec_from_file_location("apply_kernel", "twill/apply/kernel.py")
    ...
    kernel = AppliedKernel.load("out/attn_fwd.sm_90")
    kernel[grid](q_desc, k_desc, v_desc, o_desc, sm_scale, seq_len, BLOCK_M=128, BLOCK_N=128, HEAD_DIM=128)

A saved kernel is a folder with Triton's own artifacts (``<name>.json`` metadata, ``<name>.cubin``, the
final ``.ttgir``, ``.ptx``, ``.llir``), the TTGIR twill handed to Triton (``applied.ttgir``) and
``twill_apply.json`` (argument names and types, constexpr values, the apply report).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = ["MANIFEST", "AppliedKernel"]

MANIFEST = "twill_apply.json"
"""File name of the description saved beside Triton's artifacts."""

_ARTIFACTS = ("json", "cubin", "ttgir", "ptx", "llir", "ttir", "source")


class AppliedKernel:
    """A compiled kernel with the signature of the ``@triton.jit`` function it came from.

    ``kernel[grid](*args, **kwargs)`` takes the original function's arguments, constexprs included (they
    may be left out; given ones must equal the compiled values), and launches the cubin on the current
    CUDA stream through Triton's own launcher (host ``TensorDescriptor`` arguments work as with the JIT).

    Parameters
    ----------
    folder : path-like
        Where the artifacts are (see the module docstring).
    manifest : mapping
        The content of ``twill_apply.json``.

    Attributes
    ----------
    name : str
        Kernel function name.
    arg_names : tuple of str
        Arguments of the original function, in order.
    signature : dict of str to str
        Triton type of each argument (``"constexpr"`` for constexprs).
    constexprs : dict
        Compiled constexpr values.
    report : dict
        The :class:`twill.apply.triton.ApplyReport` as plain data.
    """

    def __init__(self, folder: str | os.PathLike[str], manifest: Mapping[str, Any]) -> None:
        self.folder = Path(folder)
        self.manifest = dict(manifest)
        self.name: str = manifest["name"]
        self.arg_names: tuple[str, ...] = tuple(manifest["arg_names"])
        self.signature: dict[str, str] = dict(manifest["signature"])
        self.constexprs: dict[str, Any] = dict(manifest["constexprs"])
        self.report: dict[str, Any] = dict(manifest.get("report", {}))
        self._compiled: Any = None

    # ---------------------------------------------------------------------------------------- files
    @classmethod
    def from_compiled(cls, compiled: Any, folder: str | os.PathLike[str], *, arg_names: Sequence[str],
                      signature: Mapping[str, str], constexprs: Mapping[str, Any],
                      report: Mapping[str, Any], applied_ttgir: str) -> AppliedKernel:
        """Save Triton's artifacts of ``compiled`` into ``folder`` and return the kernel.

        Parameters
        ----------
        compiled : triton.compiler.CompiledKernel
        folder : path-like
            Created if needed; files of an earlier save are replaced.
        arg_names, signature, constexprs :
            The original function's arguments, their Triton types and the constexpr values.
        report : mapping
            Plain-data apply report.
        applied_ttgir : str
            The TTGIR twill handed to Triton.
        """
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        for key, path in compiled.metadata_group.items():
            if key.rsplit(".", 1)[-1] in _ARTIFACTS:
                shutil.copyfile(path, out / key)
        (out / "applied.ttgir").write_text(applied_ttgir, encoding="utf-8")
        manifest = {"kind": "twill.applied_kernel", "name": compiled.name, "hash": compiled.hash,
                    "arg_names": list(arg_names), "signature": dict(signature),
                    "constexprs": {k: _plain(v) for k, v in constexprs.items()}, "report": dict(report)}
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        kernel = cls(out, manifest)
        kernel._compiled = compiled
        return kernel

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> AppliedKernel:
        """Load a kernel saved by :meth:`from_compiled` (no compile; the cubin is loaded at first launch).

        Raises
        ------
        FileNotFoundError
            ``folder`` has no ``twill_apply.json`` or no cubin.
        ValueError
            The manifest is not an applied-kernel manifest.
        """
        path = Path(folder)
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("kind") != "twill.applied_kernel":
            raise ValueError(f"{path / MANIFEST} is not a twill applied-kernel manifest")
        if not (path / f"{manifest['name']}.cubin").is_file():
            raise FileNotFoundError(f"{path} has no {manifest['name']}.cubin")
        return cls(path, manifest)

    @property
    def compiled(self) -> Any:
        """Triton's ``CompiledKernel`` for the saved artifacts (built on first use)."""
        if self._compiled is None:
            from triton.compiler.compiler import CompiledKernel

            group = {p.name: str(p) for p in self.folder.iterdir()
                     if p.name.startswith(f"{self.name}.") and p.suffix[1:] in _ARTIFACTS}
            fn = SimpleNamespace(arg_names=list(self.arg_names), launch_metadata=None, __name__=self.name)
            constants = {(self.arg_names.index(k),): v for k, v in self.constexprs.items()}
            src = SimpleNamespace(fn=fn, signature=dict(self.signature), constants=constants, name=self.name)
            self._compiled = CompiledKernel(src, group, self.manifest.get("hash", self.name))
        return self._compiled

    @property
    def metadata(self) -> Any:
        """Triton's kernel metadata (``shared``, ``num_warps``, ``name`` ...)."""
        return self.compiled.metadata

    @property
    def asm(self) -> Mapping[str, Any]:
        """Triton's IRs and binary by extension (``ttgir``, ``ptx``, ``cubin`` ...)."""
        return self.compiled.asm

    # ---------------------------------------------------------------------------------------- launch
    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """All arguments in order, constexprs filled in; :class:`TypeError` on a wrong or missing one."""
        values: dict[str, Any] = {}
        if len(args) > len(self.arg_names):
            raise TypeError(f"{self.name}() takes {len(self.arg_names)} arguments, {len(args)} given")
        for name, value in zip(self.arg_names, args, strict=False):
            values[name] = value
        for name, value in kwargs.items():
            if name not in self.arg_names:
                raise TypeError(f"{self.name}() has no argument {name!r}")
            if name in values:
                raise TypeError(f"{self.name}() got two values for {name!r}")
            values[name] = value
        for name, value in self.constexprs.items():
            if name in values and values[name] != value:
                raise TypeError(f"{self.name}: constexpr {name} was compiled as {value!r}, got "
                                f"{values[name]!r} (apply the schedule again for other values)")
            values[name] = value
        missing = [n for n in self.arg_names if n not in values]
        if missing:
            raise TypeError(f"{self.name}() missing argument(s): {', '.join(missing)}")
        return [values[n] for n in self.arg_names]

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        """``kernel[grid](*args, **kwargs)`` as for a JIT function (``grid`` a tuple or a callable of the
        bound arguments)."""

        def launch(*args: Any, **kwargs: Any) -> None:
            bound = self.bind(args, kwargs)
            dims = grid(dict(zip(self.arg_names, bound, strict=True))) if callable(grid) else grid
            dims = tuple(dims) + (1,) * (3 - len(tuple(dims)))
            self.compiled[dims](*bound)

        return launch

    def __repr__(self) -> str:
        return f"AppliedKernel({self.name!r} from {self.folder})"


def _plain(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return repr(value)
