#!/usr/bin/env python3
"""The analyzer's rooms and the one direction their includes may point (issue 28): a file may include its own
room and the rooms below it, never one above. Rooms, lowest first, with the public headers each owns:

  names      analyzer/src/names, analyzer/src/format      display_names.h, json_writer.h, units.h
  import     analyzer/src/import, analyzer/src/breakdowns  gpu_breakdowns.h, graph_replays.h, correlation_index.h
  load       analyzer/src/load.cpp                          load.h
  analysis   analyzer/src/analysis                          analysis.h, critical_path.h, what_if.h, step_outliers.h,
                                                            collector_threads.h
  rules      analyzer/src/rules
  pipeline   analyzer/src/pipeline                          (analyze(): the analysis, then the rules)
  report     analyzer/src/report                            report.h, live_view.h, analysis_json.h
  diff       analyzer/src/diff, analyzer/src/export          diff.h, export.h
  multirank  analyzer/src/multirank                         multi_rank.h

  check_rooms.py [REPO]     # exit 0: every include points down; 1: the wrong-way includes, one per line
"""
import os
import re
import sys

ROOMS = ["names", "import", "load", "analysis", "rules", "pipeline", "report", "diff", "multirank"]
FOLDER_ROOM = {"names": "names", "format": "names", "import": "import", "breakdowns": "import",
               "analysis": "analysis", "rules": "rules", "pipeline": "pipeline", "report": "report",
               "diff": "diff", "export": "diff", "multirank": "multirank"}
PUBLIC_ROOM = {"display_names.h": "names", "json_writer.h": "names", "units.h": "names",
               "gpu_breakdowns.h": "import", "graph_replays.h": "import",
               "correlation_index.h": "import", "load.h": "load",
               "analysis.h": "analysis", "critical_path.h": "analysis", "what_if.h": "analysis",
               "step_outliers.h": "analysis",
               "collector_threads.h": "analysis", "report.h": "report", "analysis_json.h": "report", "live_view.h": "report", "diff.h": "diff", "export.h": "diff",
               "multi_rank.h": "multirank"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of_file(rel):
    """The room of a file under analyzer/ (src/ROOM/..., src/load.cpp, include/stepscope/analyzer/X.h)."""
    parts = rel.split("/")
    if len(parts) == 2 and parts[0] == "src":
        return "load" if parts[1] == "load.cpp" else None
    if parts[0] == "src" and len(parts) >= 3:
        return FOLDER_ROOM.get(parts[1])
    if parts[:3] == ["include", "stepscope", "analyzer"]:
        return PUBLIC_ROOM.get(parts[3])
    return None


def room_of_include(inc):
    if inc.startswith("stepscope/analyzer/"):
        return PUBLIC_ROOM.get(inc[len("stepscope/analyzer/"):], "?")
    head = inc.split("/")[0]
    return FOLDER_ROOM.get(head) if "/" in inc else None  # "foo.h" beside the file: its own room


def check(repo):
    base = os.path.join(repo, "analyzer")
    bad, unknown, files = [], [], 0
    for d in ("src", "include"):
        for root, _, names in os.walk(os.path.join(base, d)):
            for n in sorted(names):
                if not n.endswith((".cpp", ".h", ".inc")):
                    continue
                rel = os.path.relpath(os.path.join(root, n), base)
                room = room_of_file(rel)
                if room is None:
                    unknown.append(f"analyzer/{rel}: in no room (add it to tests/rooms/check_rooms.py)")
                    continue
                files += 1
                with open(os.path.join(root, n), errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    inc = m.group(1)
                    target = room_of_include(inc)
                    if target == "?":
                        unknown.append(f"analyzer/{rel}: includes {inc}, a public header in no room")
                    elif target and ROOMS.index(target) > ROOMS.index(room):
                        line = text.count("\n", 0, m.start()) + 1
                        bad.append(f"analyzer/{rel}:{line}: room '{room}' includes \"{inc}\" of room '{target}', "
                                   f"which is above it ({' < '.join(ROOMS)})")
    return files, bad, unknown


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files, bad, unknown = check(repo)
    for line in unknown + bad:
        print(line)
    if unknown or bad:
        return 1
    print(f"check_rooms: {files} files in {len(ROOMS)} rooms, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
