"""A real tf.data pipeline with a slow map, consumed by a small Keras-free training loop on CPU.

    python_tfdata_train.py                 # slow map, no prefetch: the loop waits for every batch
    python_tfdata_train.py --autotune      # num_parallel_calls=AUTOTUNE + prefetch(AUTOTUNE)

Prints: steps, the loop's own measured wait share, final loss.
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def slow_decode(i):
    time.sleep(0.004)  # slow per-item decode
    rng = np.random.default_rng(int(i))
    return rng.random((32, 32, 3), dtype=np.float32), np.int64(i % 10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autotune", action="store_true")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    tf.random.set_seed(0)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    ds = tf.data.Dataset.range(a.steps * a.batch)
    decode = lambda i: tf.numpy_function(slow_decode, [i], (tf.float32, tf.int64))  # noqa: E731
    ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE if a.autotune else None)
    ds = ds.batch(a.batch)
    if a.autotune:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    w = tf.Variable(tf.random.normal((32 * 32 * 3, 10), stddev=0.01, seed=1))
    opt = tf.keras.optimizers.SGD(0.05) if hasattr(tf, "keras") else None

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.reshape(x, (-1, 32 * 32 * 3)) @ w
            for _ in range(20):  # some compute per step
                logits = logits + 0.001 * tf.tanh(logits)
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
    del opt
    print(f"steps {steps}")
    print(f"wait_share {waited / total:.4f}")
    print(f"loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
