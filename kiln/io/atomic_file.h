// Atomic file replacement: a reader (or a resumed run after a crash) sees
// either the old file or the complete new one, never a torn mix.
//
// The bytes go to a temp file in the target's own directory (rename is only
// atomic within one file system), which is flushed and fsynced before it is
// renamed over the target; the directory is then fsynced so the rename itself
// survives a power cut. If anything fails, or the writer is destroyed before
// commit(), the temp file is removed and the target is left untouched.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace kiln {

class AtomicFileWriter {
 public:
  // Creates the temp file next to `path`; throws kiln::Error naming the path
  // and the errno text (missing directory, permission, ...).
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();  // aborts (removes the temp file) unless committed
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends bytes; throws on a write error (disk full, ...) after aborting.
  void write(const void* data, size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Flushes, fsyncs, renames over the target and fsyncs the directory.
  void commit();
  // Removes the temp file; the target keeps its old contents (or stays absent).
  void abort() noexcept;

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  size_t bytes_written() const { return written_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  size_t written_ = 0;
  bool done_ = false;  // committed or aborted
};

// Writes `bytes` to `path` atomically (one AtomicFileWriter, committed).
void write_file_atomic(const std::string& path, std::string_view bytes);

// fsyncs a directory so that renames and creations inside it are durable.
void fsync_directory(const std::string& dir);

}  // namespace kiln
