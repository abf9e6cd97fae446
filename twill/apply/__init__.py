"""Schedules back into Triton: :mod:`.triton` (the entry point, ``twill apply``) re-enters Triton's TTGIR
with the schedule's stages and warp groups, through :mod:`.map` (placement), :mod:`.rewrite` (the TTGIR
edit), :mod:`.peel` (last-iteration peel), :mod:`.compile` (the compile) and :mod:`.kernel` (the runnable
kernel). The names of :mod:`.triton` are re-exported, so ``from twill.apply import apply`` keeps working."""

from twill.apply.triton import (
    AppliedKernelResult,
    ApplyError,
    ApplyReport,
    apply,
    refuse_unsupported,
    triton_apart,
)

__all__ = ["AppliedKernelResult", "ApplyError", "ApplyReport", "apply", "refuse_unsupported", "triton_apart"]
