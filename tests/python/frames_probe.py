# Driven by python_frames_test: burns CPU in a known function and line under the frames probe, then asks the
# probe (preloaded, reached through ctypes) to write what its signal handler captured.
import ctypes
import sys
import time


class Worker:
    def hot_leaf(self, n):
        total = 0
        for i in range(n):
            total += (i * i) % 7 + (i // 3) * 2 - (i & 5) + (i | 3) - (i ^ 9)  # HOT LINE
        return total


def middle(seconds):
    w = Worker()
    end = time.process_time() + seconds
    while time.process_time() < end:
        w.hot_leaf(20000)


def main():
    middle(float(sys.argv[2]))
    return ctypes.CDLL(None).stepscope_probe_dump(sys.argv[1].encode())


if __name__ == "__main__":
    print("samples", main())
