"""Old import paths of the modules that moved into subpackages (kept for one release).

Until 0.1 every module sat flat in ``twill/``; the layout now follows the architecture (see README,
"Moved modules"). Importing an old path such as ``twill.problem`` still works: a meta-path finder maps it
to the new module (``twill.model.problem``) and warns with a :class:`DeprecationWarning` naming the new
path. The old name is bound to the *same* module object, so ``isinstance`` checks and monkeypatching
through either name agree.

    >>> MOVED["twill.problem"]
    'twill.model.problem'
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "MovedModuleFinder", "install"]

MOVED: dict[str, str] = {
    "twill.graph": "twill.ir.graph",
    "twill.machine": "twill.ir.machine",
    "twill.costmodel": "twill.ir.costmodel",
    "twill.paper": "twill.ir.paper",
    "twill.problem": "twill.model.problem",
    "twill.liveness": "twill.model.liveness",
    "twill.bounds": "twill.model.bounds",
    "twill.normalize": "twill.solvers.normalize",
    "twill.ilp": "twill.solvers.ilp",
    "twill.smt": "twill.solvers.smt",
    "twill.cpsat": "twill.solvers.cpsat",
    "twill.modular": "twill.solvers.modular",
    "twill.ims": "twill.solvers.modulo.ims",
    "twill.modulo": "twill.solvers.modulo.methods",
    "twill.encoding": "twill.solvers.joint.encoding",
    "twill.joint": "twill.solvers.joint.smt",
    "twill.joint_cpsat": "twill.solvers.joint.cpsat",
    "twill.explain": "twill.analysis.explain",
    "twill.simulate": "twill.analysis.simulate",
    "twill.show": "twill.render.show",
    "twill.plot": "twill.render.plot",
    "twill.terminal": "twill.render.terminal",
    "twill.apply_compile": "twill.apply.compile",
    "twill.apply_kernel": "twill.apply.kernel",
    "twill.apply_map": "twill.apply.map",
    "twill.apply_peel": "twill.apply.peel",
    "twill.apply_rewrite": "twill.apply.rewrite",
    "twill.regs": "twill.calibrate.regs",
}
"""Old dotted module name -> new one. ``twill.search`` and ``twill.apply`` are packages now and re-export
the public names of ``twill.search.algorithm1`` and ``twill.apply.triton``."""


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; import it from there (the old path goes in the "
                      "next release)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__  # the import system overwrites __spec__ with the alias's; put it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module is the new one, already executed); restore its own ``__spec__``."""
        module.__spec__ = self.spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old dotted names in :data:`MOVED` and loads them as the new module object."""

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for ``fullname`` if it is an old path, else ``None`` (the other finders decide)."""
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


class _KeepsPublicNames(ModuleType):
    """The type of the ``twill`` package: loading an old path never rebinds a public name of the package.

    The import system binds a newly loaded submodule as an attribute of its parent. ``twill.explain`` and
    ``twill.simulate`` are public functions *and* old module paths, so the first ``import twill.explain``
    would replace the function by the module; this keeps the function (the module stays reachable as
    ``sys.modules["twill.explain"]``, as it was before the move).
    """

    def __setattr__(self, name: str, value: object) -> None:
        held = self.__dict__.get(name)
        if (f"{self.__name__}.{name}" in MOVED and isinstance(value, ModuleType) and held is not None
                and not isinstance(held, ModuleType)):
            return
        super().__setattr__(name, value)


def install(package: ModuleType) -> None:
    """Put one :class:`MovedModuleFinder` on :data:`sys.meta_path` (idempotent) and keep ``package``'s
    public names from being rebound by an old path's import."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
    package.__class__ = _KeepsPublicNames
