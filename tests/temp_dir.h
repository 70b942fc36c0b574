// temp_dir.h — a directory for one test, removed with everything in it
// when the test ends (an archive, a ring directory of its own).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace ringfire::testing {

class TempDir {
 public:
  // in: the directory to make it in (/dev/shm for rings of its own).
  explicit TempDir(const std::string& in = "/tmp") {
    std::string tmpl = in + "/rf-test.XXXXXX";
    path_ = mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // archive: where a test's archive goes (made by its recorder).
  std::string archive() const { return path_ + "/a"; }

 private:
  std::string path_;
};

}  // namespace ringfire::testing
