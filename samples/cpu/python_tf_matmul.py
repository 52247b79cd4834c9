"""A tf.function of 256x256 matmuls (oneDNN's JIT sgemm on CPU). Its JIT kernels keep data below the stack
pointer: a sampling profiler whose signal frame lands on the thread's own stack corrupts the heap (glibc:
"corrupted size vs. prev_size"). The collector's alternate signal stack must keep it whole.

Output: `sum S` (deterministic).
"""
import numpy as np
import tensorflow as tf

b = tf.constant(np.full((256, 256), 1.0 / 256, np.float32))


@tf.function
def chain():
    m = b
    for _ in range(4):
        m = tf.tanh(m @ b)
    return m


total = 0.0
for _ in range(20):
    total += float(tf.reduce_sum(chain()))
print(f"sum {total:.4f}")
