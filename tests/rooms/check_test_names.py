#!/usr/bin/env python3
"""Catch2 test names that CTest cannot run (catch_discover_tests registers each TEST_CASE as a test of its own):
a ';' splits the name into a CMake list, so the test runs a filter that matches nothing (five cases ran nothing
until 2026-11-23, one more on 2026-11-29); a name starting with '-' reaches the test binary as an option.
  check_test_names.py [REPO]   # exit 0: every name runs; 1: the bad ones, file:line each
"""
import os
import re
import sys

TEST_CASE = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)', re.S)


def bad_names(repo):
    out = []
    for top in ("analyzer", "collector", "store", "gui", "cli", "tests", "bench"):
        for root, dirs, names in os.walk(os.path.join(repo, top)):
            dirs[:] = [d for d in dirs if not d.startswith("build")]
            for n in sorted(names):
                if not n.endswith(".cpp"):
                    continue
                path = os.path.join(root, n)
                with open(path, errors="replace") as f:
                    text = f.read()
                for m in TEST_CASE.finditer(text):
                    name = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
                    line = text.count("\n", 0, m.start()) + 1
                    rel = os.path.relpath(path, repo)
                    if ";" in name:
                        out.append(f"{rel}:{line}: a ';' in the test name (CTest splits it): {name}")
                    elif name.startswith("-"):
                        out.append(f"{rel}:{line}: the test name starts with '-' (read as an option): {name}")
    return out


if __name__ == "__main__":
    bad = bad_names(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    for b in bad:
        print(b)
    sys.exit(1 if bad else 0)
