"""Kernels shipped with the runner; each module defines a `SPEC` (see kernels/spec.py)."""

# name -> "module:ATTR". Kernels from other packages plug in the same way through
# `kernel=external kernel.spec=pkg.module:SPEC`, without being listed here.
BUILTIN = {
    "vector_add": "kernels.vector_add:SPEC",
    "softmax": "kernels.softmax:SPEC",
}
