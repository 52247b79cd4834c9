"""A real tf.data pipeline with a slow map, consumed by a small Keras-free training loop on CPU.

    python_tfdata_train.py                 # slow map, no prefetch (not even TF's injected one): the loop
                                           # waits for every batch
    python_tfdata_train.py --autotune      # num_parallel_calls=AUTOTUNE + prefetch(AUTOTUNE)

Prints: steps, the loop's own measured wait share (`wait_share`), `loop_s`, final loss.
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


DECODE_S = 0.004


def slow_decode(i):
    time.sleep(DECODE_S)  # slow per-item read + decode (I/O and codec latency)
    rng = np.random.default_rng(int(i))
    return rng.random((32, 32, 3), dtype=np.float32), np.int64(i % 10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autotune", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--decode-ms", type=float, default=2.5, help="per item")
    ap.add_argument("--work", type=int, default=150, help="elementwise passes over a 512x512 tensor per step (the step's compute)")
    a = ap.parse_args()
    global DECODE_S
    DECODE_S = a.decode_ms / 1000.0
    tf.random.set_seed(0)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    ds = tf.data.Dataset.range(a.steps * a.batch)
    decode = lambda i: tf.numpy_function(slow_decode, [i], (tf.float32, tf.int64))  # noqa: E731
    ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE if a.autotune else None)
    ds = ds.batch(a.batch)
    if a.autotune:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    else:
        # Really no prefetch: by default TF injects a prefetch into pipelines that lack one and fuses map+batch
        # into one op that maps ahead on its own thread; a pipeline without either waits for every batch.
        opts = tf.data.Options()
        opts.experimental_optimization.inject_prefetch = False
        opts.experimental_optimization.apply_default_optimizations = False
        ds = ds.with_options(opts)
    w = tf.Variable(tf.random.normal((32 * 32 * 3, 10), stddev=0.01, seed=1))
    block = tf.constant(np.random.default_rng(3).standard_normal((512, 512)).astype(np.float32) / 16)

    @tf.function
    def step(x, y):
        m = block
        for _ in range(a.work):  # the step's compute: elementwise work on a 512x512 tensor
            m = tf.tanh(m * 1.01 + 0.01)
        with tf.GradientTape() as tape:
            logits = tf.reshape(x, (-1, 32 * 32 * 3)) @ w + 0.001 * tf.reduce_mean(m)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        g = tape.gradient(loss, [w])
        w.assign_sub(0.05 * g[0])
        return loss

    waited, steps, loss = 0, 0, None
    it = iter(ds)
    start = time.monotonic_ns()
    while True:
        t0 = time.monotonic_ns()
        try:
            x, y = next(it)
        except StopIteration:
            break
        waited += time.monotonic_ns() - t0
        loss = step(x, y)
        steps += 1
    total = time.monotonic_ns() - start
    print(f"steps {steps}")
    print(f"wait_share {waited / total:.4f}")
    print(f"loop_s {total / 1e9:.4f}")
    print(f"loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
