#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "stepscope/store/store.h"

namespace stepscope::store {

namespace {
bool has_table(sqlite3* db, const char* name) {
  sqlite3_stmt* s = nullptr;
  bool found = false;
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", -1, &s, nullptr) ==
      SQLITE_OK) {
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    found = sqlite3_step(s) == SQLITE_ROW;
  }
  sqlite3_finalize(s);
  return found;
}
}  // namespace

std::string missing_file_reason(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return "is a directory: name a file in it (analyze, report and import also read a folder's files)";
  const bool there = std::filesystem::exists(path, ec);
  if (ec) return "cannot read: " + ec.message();  // a symlink loop: not "no such file"
  if (!there) return "no such file";
  if (!std::filesystem::is_regular_file(path, ec)) return "not a regular file";
  if (std::ifstream in(path, std::ios::binary); !in) return std::string("cannot read: ") + std::strerror(errno);
  return "cannot read";
}

FileKind sniff_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return FileKind::Missing;
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileKind::Missing;
  unsigned char head[100] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  size_t n = size_t(in.gcount());
  if (n >= 2 && head[0] == 0x1f && head[1] == 0x8b) return FileKind::Gzip;
  if (n >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd) return FileKind::Zstd;
  if (n >= 16 && std::memcmp(head, "SQLite format 3", 16) == 0) {
    if (n >= 72) {
      uint32_t app = (uint32_t(head[68]) << 24) | (uint32_t(head[69]) << 16) | (uint32_t(head[70]) << 8) | head[71];
      if (app == uint32_t(kApplicationId)) return FileKind::Store;
    }
    sqlite3* db = nullptr;
    FileKind kind = FileKind::OtherSqlite;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      if (has_table(db, "StringIds") || has_table(db, "CUPTI_ACTIVITY_KIND_KERNEL") ||
          has_table(db, "TARGET_INFO_SESSION_START_TIME") || has_table(db, "META_DATA_EXPORT"))
        kind = FileKind::NsysSqlite;
    }
    sqlite3_close(db);
    return kind;
  }
  for (size_t i = 0; i < n; ++i) {
    // Skip a UTF-8 BOM and whitespace.
    if (i == 0 && n >= 3 && head[0] == 0xef && head[1] == 0xbb && head[2] == 0xbf) {
      i = 2;
      continue;
    }
    if (std::isspace(head[i])) continue;
    return (head[i] == '{' || head[i] == '[') ? FileKind::Json : FileKind::Other;
  }
  return FileKind::Other;
}

std::string temp_path_beside(const std::string& path) {
  static std::atomic<int> counter{0};
  std::filesystem::path p(path);
  std::string name = "." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(counter++);
  return (p.parent_path() / name).string();
}

void require_output_folder(const std::string& output) {
  // Creating the folder made it 0755 (the umask's) and hid a mistyped path.
  const auto out = std::filesystem::absolute(output).lexically_normal();
  const auto dir = out.parent_path();
  std::error_code ec;
  // A folder named as the output: refused before the work (the rename at its end would fail with it done).
  if (std::filesystem::is_directory(out, ec))
    throw StoreError(out.string(), "is a folder: name a file in it");
  if (dir.empty() || std::filesystem::is_directory(dir, ec)) return;
  throw StoreError(out.string(), std::filesystem::exists(dir, ec)
                                     ? dir.string() + " is not a folder"
                                     : "no such folder " + dir.string() + " (create it first)");
}

void require_not_an_input(const std::string& output, const std::vector<std::string>& inputs) {
  if (output.empty() || output == "-") return;
  const auto out = std::filesystem::absolute(output).lexically_normal();
  std::error_code ec;
  for (const auto& in : inputs) {
    const auto p = std::filesystem::absolute(in).lexically_normal();
    const bool same = std::filesystem::exists(out, ec) && std::filesystem::exists(p, ec)
                          ? std::filesystem::equivalent(out, p, ec)
                          : out == p;
    if (same) throw StoreError(out.string(), "is an input of this command: name another output (nothing written)");
  }
}

void remove_store_files(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(path + suffix, ec);
}

void write_store_atomically(const Trace& t, const std::string& path, bool packed) {
  std::string tmp = temp_path_beside(path);
  try {
    WriterOptions bulk;
    bulk.durable = false;  // the rename below is what makes the result durable and whole
    bulk.batch_rows = 1 << 20;
    bulk.packed = packed;
    StoreWriter w(tmp, bulk);
    w.append(t);
    w.close();
  } catch (const StoreError& e) {
    remove_store_files(tmp);
    // Named as the store being written, not its hidden temporary (".run.db.tmp-29109-0: cannot create
    // store").
    if (e.file() == tmp) throw StoreError(path, e.reason());
    throw;
  } catch (...) {
    remove_store_files(tmp);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();  // before the removal below resets ec ("cannot write: Success")
    std::filesystem::remove(tmp, ec);
    throw StoreError(path, "cannot write: " + why);
  }
}

void StagedFiles::add(const std::string& path, std::string_view content) {
  std::error_code ec;
  if (!path.empty() && (path.back() == '/' || std::filesystem::is_directory(path, ec)))
    throw StoreError(path, "is a folder: name a file in it");  // it said "cannot replace: Not a directory"
  const std::string tmp = temp_path_beside(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0) throw StoreError(path, std::string("cannot create: ") + std::strerror(errno));
  auto fail = [&](const char* what) {
    const int saved = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw StoreError(path, std::string(what) + std::strerror(saved));
  };
  if (::fchmod(fd, S_IRUSR | S_IWUSR) != 0) fail("cannot make the file private (chmod 0600): ");
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write: ");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("cannot write: ");
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    throw StoreError(path, std::string("cannot write: ") + std::strerror(saved));
  }
  staged_.emplace_back(tmp, path);
}

void StagedFiles::commit() {
  for (size_t i = 0; i < staged_.size(); ++i) {
    const auto& [tmp, path] = staged_[i];
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int saved = errno;
      staged_.erase(staged_.begin(), staged_.begin() + std::ptrdiff_t(i));  // the renamed ones stay
      throw StoreError(path, std::string("cannot replace: ") + std::strerror(saved));
    }
  }
  staged_.clear();
}

StagedFiles::~StagedFiles() {
  for (const auto& [tmp, path] : staged_) ::unlink(tmp.c_str());
}

void write_file_atomically(const std::string& path, std::string_view content) {
  StagedFiles files;
  files.add(path, content);
  files.commit();
}

}  // namespace stepscope::store
