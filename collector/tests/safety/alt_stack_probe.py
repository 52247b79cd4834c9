"""alt_stack_probe.py SIZE SECONDS: runs Python code for SECONDS on an alternate signal stack of SIZE bytes of its
own, at the top of a 128 KiB region painted with 0xA5, then prints how deep the region was written from its top
("deepest N") and how many bytes below the alternate stack's end ("below_end N": any is a handler that ran past
the stack the program gave it). The sampling signal runs on the thread's alternate stack (SA_ONSTACK), so under
`stepscope record`/`attach` this measures the handler's stack use (signal_safety_test.cpp).

SIZE may be a comma-separated list: SECONDS on each in turn, the region painted again before each, one line
"size S deepest N below_end B" a size. With a third argument "--after-collector" the sizes wait until the collector
is loaded (`stepscope attach`), running the same code on the thread's own stack meanwhile (20 s at most)."""
import ctypes
import mmap
import sys
import time

sizes, seconds, region = [int(x) for x in sys.argv[1].split(",")], float(sys.argv[2]), 128 * 1024
buf = mmap.mmap(-1, region)
base = ctypes.addressof(ctypes.c_char.from_buffer(buf))


class StackT(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


libc = ctypes.CDLL(None, use_errno=True)
SS_DISABLE = 2


def f(n):
    return f(n - 1) if n else sum(range(200))


if sys.argv[3:] == ["--after-collector"]:
    t = time.monotonic()
    while time.monotonic() - t < 20:
        with open("/proc/self/maps") as maps:
            if "libstepscope_collector" in maps.read():
                break
        for _ in range(20):
            f(40)
    else:
        sys.exit("alt_stack_probe: the collector was not loaded within 20 s")

for size in sizes:
    buf.seek(0)
    buf.write(b"\xa5" * region)
    if libc.sigaltstack(ctypes.byref(StackT(base + region - size, 0, size)), None) != 0:
        raise OSError(ctypes.get_errno(), "sigaltstack")
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        f(40)
    libc.sigaltstack(ctypes.byref(StackT(None, SS_DISABLE, 0)), None)  # no handler runs on it while it is read
    data = bytes(buf)
    low = next((i for i in range(region) if data[i] != 0xA5), region)
    print(*(["size", size] if len(sizes) > 1 else []), "deepest", region - low, "below_end",
          max(0, region - size - low), flush=True)
