"""Kernels shipped with the runner; each module defines a `SPEC` (see kernels/spec.py)."""

# name -> "module:ATTR". Kernels from other packages plug in the same way through
# `kernel=external kernel.spec=pkg.module:SPEC`, without being listed here.
BUILTIN = {
    "vector_add": "kernels.vector_add:SPEC",
    "softmax": "kernels.softmax:SPEC",
    "softmax_online": "kernels.softmax_online:SPEC",
    "fused_gelu": "kernels.fused_gelu:SPEC",
    "layernorm": "kernels.layernorm:SPEC",
    "matmul": "kernels.matmul:SPEC",
    "matmul_bias_relu": "kernels.matmul:BIAS_RELU",
    "matmul_bias_gelu": "kernels.matmul:BIAS_GELU",
    "attention": "kernels.attention:SPEC",
    "attention_causal": "kernels.attention:CAUSAL",
    "attention_bias": "kernels.attention:BIAS",
    "attention_causal_bias": "kernels.attention:CAUSAL_BIAS",
}
