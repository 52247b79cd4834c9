"""tests/rooms/check_rooms.py on this tree (every include points down) and on a copy with one wrong-way include
(it must say which, and fail)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(HERE, "check_rooms.py")


class Rooms(unittest.TestCase):
    def test_this_tree_points_down(self):
        r = subprocess.run([sys.executable, CHECK, ROOT], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertRegex(r.stdout, r"^check_rooms: \d+ files in 9 rooms, every include points down\n$")

    def test_a_wrong_way_include_fails_by_name(self):
        with tempfile.TemporaryDirectory() as d:
            shutil.copytree(os.path.join(ROOT, "analyzer"), os.path.join(d, "analyzer"),
                            ignore=shutil.ignore_patterns("tests"))
            victim = os.path.join(d, "analyzer", "src", "analysis", "step_outliers.cpp")
            with open(victim) as f:
                text = f.read()
            # What the issue found: the analysis formatting its text with the report's helpers.
            with open(victim, "w") as f:
                f.write('#include "report/report_util.h"\n' + text)
            # And a room nobody placed.
            os.makedirs(os.path.join(d, "analyzer", "src", "newroom"))
            with open(os.path.join(d, "analyzer", "src", "newroom", "x.cpp"), "w") as f:
                f.write("int x;\n")
            r = subprocess.run([sys.executable, CHECK, d], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertEqual(r.stdout.splitlines(), [
                "analyzer/src/newroom/x.cpp: in no room (add it to tests/rooms/check_rooms.py)",
                "analyzer/src/analysis/step_outliers.cpp:1: room 'analysis' includes \"report/report_util.h\" of "
                "room 'report', which is above it (names < import < load < analysis < rules < pipeline < report < "
                "diff < multirank)"])


class TestNames(unittest.TestCase):
    """tests/rooms/check_test_names.py: every Catch2 test name can be run by CTest."""
    NAMES = os.path.join(HERE, "check_test_names.py")

    def test_this_tree_has_no_name_ctest_cannot_run(self):
        r = subprocess.run([sys.executable, self.NAMES, ROOT], capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stdout), (0, ""))

    def test_a_semicolon_and_a_leading_dash_are_named(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "tests", "x"))
            with open(os.path.join(d, "tests", "x", "x_test.cpp"), "w") as f:
                f.write('TEST_CASE("fine, with a comma") {}\n'
                        'TEST_CASE("split "\n          "here; and there", "[tag]") {}\n'
                        'TEST_CASE("--flag first") {}\n')
            r = subprocess.run([sys.executable, self.NAMES, d], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertEqual(r.stdout.splitlines(), [
                "tests/x/x_test.cpp:2: a ';' in the test name (CTest splits it): split here; and there",
                "tests/x/x_test.cpp:4: the test name starts with '-' (read as an option): --flag first"])


if __name__ == "__main__":
    unittest.main()
