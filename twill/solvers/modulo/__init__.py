"""The modulo-scheduling phase: the iterative heuristic (:mod:`.ims`) and the exact methods (:mod:`.methods`:
SMT, ILP, CP-SAT)."""
