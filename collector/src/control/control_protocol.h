// The control channel between `stepscope attach/detach/start/stop` and the collector inside a process: one
// unix stream socket per process, /tmp/stepscope-<uid>/<pid>.sock, in a directory of mode 0700 owned by the
// process's user, the socket itself 0600; the collector also checks the peer's uid (same user or root).
// No network listener. A request is a command line followed by `key=value` lines and an empty line; the reply
// is one line, "ok ..." or "error ...". Commands: status, start (options as key=value), stop, and for a flight
// recording dump (a save; "ok path=STORE") and snapshot (dir=DIR: this process's window as a part there).
#pragma once

#include <sys/types.h>

#include <map>
#include <sstream>
#include <string>

namespace stepscope::collector::control {

inline std::string socket_dir(uid_t uid) { return "/tmp/stepscope-" + std::to_string(uid); }
inline std::string socket_path(uid_t uid, pid_t pid) { return socket_dir(uid) + "/" + std::to_string(pid) + ".sock"; }

constexpr size_t kMaxRequestBytes = 16 * 1024;

struct Request {
  std::string command;
  std::map<std::string, std::string> options;
};

inline std::string encode(const Request& r) {
  std::string s = r.command + "\n";
  for (const auto& [k, v] : r.options) s += k + "=" + v + "\n";
  return s + "\n";
}

// Parses up to the empty line; false when the request is incomplete or malformed.
inline bool decode(const std::string& text, Request& r) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, r.command) || r.command.empty()) return false;
  while (std::getline(in, line)) {
    if (line.empty()) return true;
    const auto eq = line.find('=');
    if (eq == std::string::npos) return false;
    r.options[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return false;
}

}  // namespace stepscope::collector::control
