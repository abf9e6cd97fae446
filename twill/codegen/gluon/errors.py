"""Errors of the Gluon code generator."""

from __future__ import annotations

from twill.apply.map import ApplyError

__all__ = ["CodegenError"]


class CodegenError(ApplyError):
    """The schedule cannot be realized as a Gluon kernel: an op without a lowering (the message names the op,
    its kind and its TTGIR line), a schedule of another graph, a kernel over the machine's limits."""
