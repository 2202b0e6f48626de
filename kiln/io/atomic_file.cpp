#include "kiln/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <vector>

#include "kiln/core/error.h"

namespace kiln {
namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// write(2) may write less than asked and may be interrupted; loop until done.
int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    size -= size_t(n);
  }
  return 0;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  KILN_CHECK(!path_.empty(), "atomic write: empty file name");
  // A dot-name keeps the temp file out of directory scans (e.g. checkpoint lookup).
  std::string name = ".";
  name += std::filesystem::path(path_).filename().string();
  name += ".tmp.XXXXXX";
  std::string tmpl = (std::filesystem::path(parent_dir(path_)) / name).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  fd_ = ::mkostemp(buf.data(), O_CLOEXEC);
  if (fd_ < 0) {
    int err = errno;
    KILN_FAIL("cannot write ", path_, ": creating a temp file in ", parent_dir(path_), " failed: ", errno_text(err));
  }
  temp_path_ = buf.data();
  // mkstemp makes the file 0600; a saved checkpoint should read like any other file.
  ::fchmod(fd_, 0644);
}

AtomicFileWriter::~AtomicFileWriter() { abort(); }

void AtomicFileWriter::write(const void* data, size_t size) {
  KILN_CHECK(!done_, "cannot write ", path_, ": the atomic writer was already committed or aborted");
  if (size == 0) return;
  if (int err = write_all(fd_, static_cast<const char*>(data), size)) {
    abort();
    KILN_FAIL("cannot write ", path_, " (after ", written_, " bytes): ", errno_text(err),
              "; the previous file, if any, is unchanged");
  }
  written_ += size;
}

void AtomicFileWriter::commit() {
  KILN_CHECK(!done_, "cannot commit ", path_, ": the atomic writer was already committed or aborted");
  // We write with write(2), so there is no user-space buffer to flush; fsync
  // makes the data durable before the rename publishes it. Without it a crash
  // could leave the new name pointing at a zero-length file.
  if (::fsync(fd_) != 0) {
    int err = errno;
    abort();
    KILN_FAIL("cannot write ", path_, ": fsync failed: ", errno_text(err), "; the previous file, if any, is unchanged");
  }
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    int err = errno;
    abort();
    KILN_FAIL("cannot write ", path_, ": close failed: ", errno_text(err), "; the previous file, if any, is unchanged");
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    abort();
    KILN_FAIL("cannot write ", path_, ": renaming the temp file into place failed: ", errno_text(err),
              "; the previous file, if any, is unchanged");
  }
  done_ = true;
  fsync_directory(parent_dir(path_));
}

void AtomicFileWriter::abort() noexcept {
  if (done_) return;
  done_ = true;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    KILN_FAIL("cannot open directory ", dir, " to fsync it: ", errno_text(err));
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems (e.g. certain network mounts) refuse fsync on a
  // directory; the rename has still happened, so only real I/O errors count.
  KILN_CHECK(rc == 0 || err == EINVAL || err == ENOTSUP, "fsync of directory ", dir, " failed: ", errno_text(err));
}

}  // namespace kiln
