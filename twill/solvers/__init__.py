"""The encodings and the solvers they run on: the status vocabulary (:mod:`.status`), the SMT/ILP/CP-SAT
back ends (:mod:`.smt`, :mod:`.ilp`, :mod:`.cpsat`), cost normalization (:mod:`.normalize`, an ILP),
the modulo
phase (:mod:`.modulo`) and the joint problem (:mod:`.joint`). Imports :mod:`twill.model` and :mod:`twill.ir`,
never the frontend, the search or :mod:`twill.verify`."""
