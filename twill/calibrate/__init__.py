"""Measuring the machine model: :mod:`.regs` (ptxas register counts of compiled kernels)."""
