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


if __name__ == "__main__":
    unittest.main()
