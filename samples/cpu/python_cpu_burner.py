"""One Python function burns CPU for a while (the profiler must put it on top of >= 60% of the samples of the
main thread, with its name and line). Prints a deterministic result."""
import sys
import time


def burn_cpu(seconds):
    end = time.process_time() + seconds
    acc = 0
    while time.process_time() < end:
        for i in range(2000):
            acc = (acc * 31 + i * i) % 1000003  # BURN LINE
    return acc


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    burn_cpu(seconds)
    print("burned")


if __name__ == "__main__":
    main()
