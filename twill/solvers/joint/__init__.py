"""The joint problem (stages, warp groups, buffers, registers): its SMT encoding (:mod:`.encoding`), the SMT
solve and range queries (:mod:`.smt`) and the CP-SAT formulation (:mod:`.cpsat`)."""
