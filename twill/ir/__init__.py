"""The loop as data: the op/dependence graph (:mod:`.graph`), the machine (:mod:`.machine`, read from
``machines/*.toml``) and the cost model that prices ops on it (:mod:`.costmodel`). Imports nothing of
twill but
:mod:`twill.errors`."""
