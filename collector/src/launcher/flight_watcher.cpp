#include "launcher/flight_watcher.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "flight/save_names.h"
#include "launcher/launcher_clock.h"
#include "launcher/rank_outputs.h"
#include "stepscope/collector/launcher.h"
#include "stepscope/store/store.h"

namespace fs = std::filesystem;

namespace stepscope::collector {
namespace {

std::map<std::string, std::string> read_trigger(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (const auto eq = line.find('='); eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
  return m;
}

int64_t parts_bytes(const std::string& dir) {
  int64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".db") n += int64_t(e.file_size(ec));
  return n;
}

// In the unit that shows it: a quota of 1 KiB is "1.0 KiB", not "0.0 MiB".
std::string size_text(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double x = double(bytes) / 1024.0;
  size_t u = 0;
  while (x >= 1024.0 && u + 1 < std::size(units)) {
    x /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", x, units[u]);
  return buf;
}

}  // namespace

std::string flight_prefix(const std::string& output) {
  fs::path p(output);
  if (p.extension() == ".db") p.replace_extension();
  return p.string();
}

FlightWatcher::FlightWatcher(std::string dir, std::string prefix, std::map<std::string, std::string> meta,
                             int64_t quota_bytes, bool print)
    : dir_(std::move(dir)),
      prefix_(std::move(prefix)),
      meta_(std::move(meta)),
      quota_(quota_bytes),
      print_(print) {}

void FlightWatcher::poll() {
  std::error_code ec;
  const int64_t now = mono_ns();
  std::vector<std::string> ready;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string n = e.path().filename().string();
    if (n.empty() || n[0] == '.' || n == "exit" || !e.is_directory(ec)) continue;
    auto [it, fresh] = first_seen_.emplace(n, now);
    if (!fresh && now - it->second >= kFlightGatherNs) ready.push_back(n);
  }
  std::sort(ready.begin(), ready.end());
  for (const auto& n : ready) {
    first_seen_.erase(n);
    merge(n, read_trigger(dir_ + "/" + n + "/trigger"));
  }
}

namespace {
// Renamed first: a process still scanning takes a dot-name for none of its business.
std::string merging_path(const std::string& dir, const std::string& name) {
  return dir + "/.merging-" + name;
}
}  // namespace

bool flight_save_pending(const std::string& save) {
  std::error_code ec;
  const auto slash = save.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : save.substr(0, slash);
  return fs::exists(save, ec) || fs::exists(merging_path(dir, save.substr(slash + 1)), ec);
}

void FlightWatcher::merge(const std::string& name, std::map<std::string, std::string> trigger) {
  std::error_code ec;
  const std::string taken = merging_path(dir_, name);
  fs::rename(dir_ + "/" + name, taken, ec);
  if (ec) return;
  const std::string output = prefix_ + "-" + name + ".db";
  // -o run-%r.db: one store per rank for each save, as `record` writes one per rank at the end.
  const bool per_rank = prefix_.find("%r") != std::string::npos;
  const int64_t bytes = parts_bytes(taken);
  const std::string why = trigger.count("detail") ? trigger["kind"] + ": " + trigger["detail"] : name;
  ++merged_;
  if (bytes == 0) {
    ++empty_;
    if (print_)
      std::fprintf(stderr, "stepscope: flight: nothing to save for %s (no process had rows)\n", why.c_str());
    not_saved(name, "no process had rows");
  } else if (quota_ > 0 && saved_bytes_ + bytes > quota_) {
    ++over_quota_;
    const std::string over = "its " + size_text(bytes) + " would pass the --flight-quota of " +
                             size_text(quota_) + " (used so far: " + std::to_string(saved_.size()) +
                             (saved_.size() == 1 ? " save, " : " saves, ") + size_text(saved_bytes_) +
                             "); raise it";
    if (print_) std::fprintf(stderr, "stepscope: flight: not saved (%s): %s\n", why.c_str(), over.c_str());
    not_saved(name, over);
  } else {
    std::map<std::string, std::string> meta = meta_;
    for (const auto& [k, v] : trigger) meta["flight." + (k == "kind" ? std::string("trigger") : k)] = v;
    meta["flight.save"] = name;
    try {
      RecordSummary s;
      if (per_rank) {
        merge_parts_by_rank(taken, output, meta.count("host") ? meta["host"] : host_name(), meta, s);
      } else {
        merge_parts(taken, output, meta, s);
        s.outputs.push_back(output);
      }
      for (const auto& out : s.outputs) {
        saved_bytes_ += int64_t(fs::file_size(out, ec));
        saved_.push_back(out);
        if (print_) std::fprintf(stderr, "stepscope: flight: saved %s (%s)\n", out.c_str(), why.c_str());
      }
    } catch (const std::exception& e) {
      ++failed_;
      if (print_) std::fprintf(stderr, "stepscope: flight: cannot save %s: %s\n", output.c_str(), e.what());
      not_saved(name, std::string("cannot save ") + output + ": " + e.what());
    }
  }
  fs::remove_all(taken, ec);
}

// Why save `name` was not written, for `stepscope dump` (cli/cmd_attach.cpp reads "<dir>/.not-saved-<name>"):
// it fails once the merge was tried, with this reason, instead of waiting out --wait. Written before the
// save's folder goes, so a dump that sees the folder gone finds it.
void FlightWatcher::not_saved(const std::string& name, const std::string& why) {
  std::ofstream(dir_ + "/.not-saved-" + name) << why << '\n';
}

std::string FlightWatcher::summary() const {
  const size_t n = saved_.size();
  std::string s = "flight recorder: " + std::to_string(n) + (n == 1 ? " window" : " windows") + " saved";
  if (n > 0) s += " (" + size_text(saved_bytes_) + ")";
  if (over_quota_)
    s += ", " + std::to_string(over_quota_) + " not saved: over the --flight-quota of " + size_text(quota_);
  if (empty_) s += ", " + std::to_string(empty_) + " not saved: no process had rows";
  if (failed_) s += ", " + std::to_string(failed_) + " not saved: could not be written";
  if (unsaved_)
    s += ", " + std::to_string(unsaved_) + (unsaved_ == 1 ? " trigger" : " triggers") +
         " not saved: no save folder could be made (the program's stderr says why)";
  if (held_back_)
    s += ", " + std::to_string(held_back_) + (held_back_ == 1 ? " trigger" : " triggers") +
         " held back by --flight-max-per-hour";
  if (merged_ == 0 && held_back_ == 0 && unsaved_ == 0)
    s += unwritable_.empty() ? ": no trigger fired"
                             : ": the flight folder " + dir_ + " could not be written (" + unwritable_ +
                                   "), so a trigger could not have saved or been counted";
  return s;
}

std::string FlightWatcher::exit_failure() const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ + "/exit", ec)) {
    if (e.path().extension() != ".db") continue;
    try {
      const auto m = store::StoreReader(e.path().string()).meta();
      if (auto it = m.find("flight.end"); it != m.end() && it->second != "exit") return it->second;
    } catch (const std::exception&) {
    }
  }
  return "";
}

void FlightWatcher::finish(const std::string& failure) {
  // Saves made just before the end: their processes have ended (or answered) by now.
  for (auto& [n, seen] : first_seen_) seen = mono_ns() - kFlightGatherNs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string n = e.path().filename().string();
    if (!n.empty() && n[0] != '.' && n != "exit") first_seen_.emplace(n, mono_ns() - kFlightGatherNs);
  }
  poll();
  // Each process image's triggers the hourly limit held back and those that found no save folder
  // (flight_recorder.cpp, note_trigger_counts).
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(flight::kTriggerCountsPrefix, 0) != 0) continue;
    std::ifstream in(e.path());
    int64_t held = 0, unsaved = 0;
    if (in >> held >> unsaved) {
      held_back_ += held;
      unsaved_ += unsaved;
    }
  }
  // Nothing saved or counted: said as "no trigger fired" only when a process could have written here (the
  // folder made read-only, a full or read-only file system: each process said so once on its stderr).
  if (merged_ == 0 && held_back_ == 0 && unsaved_ == 0) {
    const std::string probe = dir_ + "/.probe-" + std::to_string(getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      unwritable_ = std::strerror(errno);
    } else {
      ::close(fd);
      ::unlink(probe.c_str());
    }
  }
  const std::string exit_dir = dir_ + "/exit";
  if (!failure.empty() && fs::is_directory(exit_dir, ec)) {
    const std::string name = flight::utc_stamp() + "-exit";
    fs::rename(exit_dir, dir_ + "/" + name, ec);
    if (!ec) merge(name, {{"kind", "exit"}, {"detail", "the program ended with " + failure}});
  }
  fs::remove_all(dir_, ec);
}

}  // namespace stepscope::collector
