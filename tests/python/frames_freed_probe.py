# Driven by python_frames_test: code objects that are freed long before the probe resolves its samples, their
# addresses reused by the next ones (same sizes). Each round compiles a module /gen/mod_<i>.py whose function
# spin_<i> burns CPU, runs it, and drops it; a sample that names spin_<i> must name mod_<i>.py with it.
import ctypes
import sys
import time

TEMPLATE = """\
def spin_{i}(seconds):
    total = 0
    end = clock() + seconds
    while clock() < end:
        for j in range(300):
            total += j * j % 7
    return total


spin_{i}(SECONDS)
"""


def main():
    rounds, seconds = int(sys.argv[2]), float(sys.argv[3])
    for i in range(rounds):
        code = compile(TEMPLATE.format(i=i), f"/gen/mod_{i}.py", "exec")
        exec(code, {"clock": time.process_time, "SECONDS": seconds})
        del code
    return ctypes.CDLL(None).stepscope_probe_dump(sys.argv[1].encode())


if __name__ == "__main__":
    print("samples", main())
