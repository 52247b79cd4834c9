"""8 Python threads, each in its own function, doing deterministic work; the output is the same with and
without a profiler (1 kHz sampling must not change it). Usage: python_threads.py [iterations]"""
import hashlib
import sys
import threading

N = int(sys.argv[1]) if len(sys.argv) > 1 else 60000
results = [None] * 8


def _work(k, salt):
    h = hashlib.sha256(salt)
    acc = 0
    for i in range(N):
        acc = (acc * 1103515245 + i + k) & 0xFFFFFFFF
        if i % 1000 == 0:
            h.update(acc.to_bytes(4, "little"))
    results[k] = h.hexdigest()[:16]


def worker_0(): _work(0, b"a")
def worker_1(): _work(1, b"b")
def worker_2(): _work(2, b"c")
def worker_3(): _work(3, b"d")
def worker_4(): _work(4, b"e")
def worker_5(): _work(5, b"f")
def worker_6(): _work(6, b"g")
def worker_7(): _work(7, b"h")


def main():
    fns = [worker_0, worker_1, worker_2, worker_3, worker_4, worker_5, worker_6, worker_7]
    threads = [threading.Thread(target=f, name=f.__name__) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, r in enumerate(results):
        print(f"thread {k} {r}")


if __name__ == "__main__":
    main()
