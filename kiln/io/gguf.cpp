#include "kiln/io/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string_view>
#include <system_error>

#include "kiln/core/error.h"
#include "kiln/io/file_mapping.h"

namespace kiln {

namespace {

// The row-major shape of ggml's dims (dims[0] fastest).
Shape kiln_shape(const std::vector<int64_t>& dims) { return Shape(dims.rbegin(), dims.rend()); }

struct MappedFile {
  std::string path;
  struct stat st = {};
  std::shared_ptr<FileMapping> mapping;
  const uint8_t* base() const { return static_cast<const uint8_t*>(mapping->base); }
};

MappedFile map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    KILN_FAIL("cannot open GGUF file ", path, ": ", std::generic_category().message(err));
  }
  MappedFile f;
  f.path = path;
  if (::fstat(fd, &f.st) != 0 || !S_ISREG(f.st.st_mode)) {
    ::close(fd);
    KILN_FAIL(path, " is not a regular file");
  }
  const size_t bytes = size_t(f.st.st_size);
  f.mapping = bytes > 0 ? map_copy_on_write(fd, bytes) : nullptr;
  const int err = errno;
  ::close(fd);
  KILN_CHECK(bytes > 0, path, " is empty: not a GGUF file");
  KILN_CHECK(f.mapping, "cannot map ", path, ": ", std::generic_category().message(err));
  return f;
}

GgufHeader parse_file(const MappedFile& f) {
  try {
    return parse_gguf(f.base(), f.mapping->bytes);
  } catch (const Error& e) {
    KILN_FAIL(f.path, ": ", e.what());
  }
}

// A model's header (its first file's metadata, every file's tensors) and where each file's data begins.
struct ParsedModel {
  std::shared_ptr<const GgufHeader> header;
  std::vector<uint64_t> data_starts;
};

// gguf-split's counts (u16, i32 in the file): `absent` where the key is.
int64_t split_value(const nlohmann::json& metadata, const char* key, const std::string& path, int64_t absent) {
  if (!metadata.contains(key)) return absent;
  const nlohmann::json& v = metadata[key];
  KILN_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 65535, path, ": ", key, " is ",
             v.dump(), ", not a count of gguf-split's (0-65535)");
  return v.get<int64_t>();
}

// gguf-split's names: PREFIX-00001-of-00003.gguf is the first of three files.
std::string split_suffix(int64_t part, int64_t count) {
  char suffix[64];
  std::snprintf(suffix, sizeof(suffix), "-%05d-of-%05d.gguf", int(part + 1), int(count));  // (counts up to 65535)
  return suffix;
}

// The first file's header and each other file's tensors, checked to be one model's.
ParsedModel parse_model(std::vector<MappedFile>& files) {
  GgufHeader model = parse_file(files[0]);
  const std::string path = files[0].path;  // (a copy: files grows below)
  ParsedModel parsed{nullptr, {model.data_start}};
  const int64_t count = split_value(model.metadata, "split.count", path, 1);
  if (count > 1) {
    const int64_t part = split_value(model.metadata, "split.no", path, 0);
    const std::string suffix = split_suffix(part, count);
    const bool named = path.size() > suffix.size() && path.ends_with(suffix);
    const std::string prefix = named ? path.substr(0, path.size() - suffix.size()) : "";
    KILN_CHECK(part == 0, path, " is file ", part + 1, " of the ", count, " of a split model: open its first, ",
               named ? prefix + split_suffix(0, count) : "the one whose split.no is 0", ", as llama.cpp would");
    KILN_CHECK(named, path, " is the first of ", count, " files of a split model, but its name does not end in ",
               suffix, ", so the others cannot be found: keep the names gguf-split gave them");
    std::set<std::string> names;
    for (const GgufTensorInfo& t : model.tensors) names.insert(t.name);
    for (int64_t k = 1; k < count; ++k) {
      const std::string part_path = prefix + split_suffix(k, count);
      try {
        files.push_back(map_file(part_path));
      } catch (const Error& e) {
        KILN_FAIL(path, " is the first of ", count, " files of a split model, and its file ", k + 1,
                  " cannot be read: ", e.what());
      }
      GgufHeader other = parse_file(files.back());
      KILN_CHECK(split_value(other.metadata, "split.no", part_path, -1) == k &&
                     split_value(other.metadata, "split.count", part_path, -1) == count,
                 part_path, " is not file ", k + 1, " of ", count, " of ", path,
                 "'s model (its split.no and split.count say otherwise): the files come from different splits");
      for (GgufTensorInfo& t : other.tensors) {
        KILN_CHECK(names.insert(t.name).second, part_path, " holds tensor '", t.name, "' a second time");
        t.file = uint32_t(k);
        model.tensors.push_back(std::move(t));
      }
      parsed.data_starts.push_back(other.data_start);
    }
    const int64_t expected = split_value(model.metadata, "split.tensors.count", path, int64_t(model.tensors.size()));
    KILN_CHECK(expected == int64_t(model.tensors.size()), path, "'s split model should hold ", expected,
               " tensors (split.tensors.count), and its ", count, " files hold ", model.tensors.size());
  }
  parsed.header = std::make_shared<const GgufHeader>(std::move(model));
  return parsed;
}

// What the cache checks of each file of the last model: its path, size, inode
// and modification time, and a hash of its header's bytes (a file rewritten
// within one tick of the clock keeps its time, and a new inode may reuse the
// number of the one it replaced).
struct FileIdentity {
  std::string path;
  off_t size = -1;
  ino_t inode = 0;
  struct timespec modified = {};
  uint64_t data_start = 0;
  size_t header_hash = 0;

  static size_t hash_of(const MappedFile& f, uint64_t data_start) {
    return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(f.base()), data_start));
  }
  static FileIdentity of(const MappedFile& f, uint64_t data_start) {
    return {f.path, f.st.st_size, f.st.st_ino, f.st.st_mtim, data_start, hash_of(f, data_start)};
  }
  bool same(const MappedFile& f) const {
    return f.path == path && f.st.st_size == size && f.st.st_ino == inode && f.st.st_mtim.tv_sec == modified.tv_sec &&
           f.st.st_mtim.tv_nsec == modified.tv_nsec && hash_of(f, data_start) == header_hash;
  }
};

struct ParsedModelCache {
  std::mutex mutex;
  std::vector<FileIdentity> files;
  ParsedModel model;

  // The last model's files and header, when `first` is still its first file
  // (the caller maps and checks the others).
  std::pair<std::vector<FileIdentity>, ParsedModel> of_first(const MappedFile& first) {
    std::lock_guard<std::mutex> lock(mutex);
    if (files.empty() || !files[0].same(first)) return {};
    return {files, model};
  }
  void keep(const std::vector<MappedFile>& mapped, const ParsedModel& parsed) {
    std::lock_guard<std::mutex> lock(mutex);
    files.clear();
    for (size_t k = 0; k < mapped.size(); ++k) files.push_back(FileIdentity::of(mapped[k], parsed.data_starts[k]));
    model = parsed;
  }
};
ParsedModelCache g_last_model;

// The cached model's header when every one of its files is unchanged (its other files mapped into `files`).
ParsedModel cached_model(std::vector<MappedFile>& files) {
  auto [identities, model] = g_last_model.of_first(files[0]);
  for (size_t k = 1; k < identities.size(); ++k) {
    try {
      files.push_back(map_file(identities[k].path));
    } catch (const Error&) {  // gone: parsing again says so
      files.resize(1);
      return {};
    }
    if (!identities[k].same(files.back())) {
      files.resize(1);
      return {};
    }
  }
  return model;
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  std::vector<MappedFile> files{map_file(path)};
  ParsedModel model = cached_model(files);
  if (!model.header) {
    model = parse_model(files);
    g_last_model.keep(files, model);
  }
  GgufFile f;
  f.path_ = path;
  f.header_ = model.header;
  for (size_t k = 0; k < files.size(); ++k)
    f.parts_.push_back({files[k].mapping, files[k].base() + model.data_starts[k]});
  return f;
}

const GgufTensorInfo* GgufFile::find(const std::string& name) const { return header_->find(name); }

Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find(name);
  KILN_CHECK(t, path_, " holds no tensor '", name, "'");
  const Part& part = parts_[t->file];
  void* data = const_cast<uint8_t*>(part.data + t->offset);  // (mapped copy-on-write)
  const Shape shape = kiln_shape(t->dims);
  switch (t->type) {
    case GgufType::F32:
      return Tensor::wrap(data, shape, DType::f32, part.mapping);
    case GgufType::F16:
      return Tensor::wrap(data, shape, DType::f16, part.mapping);
    case GgufType::BF16:
      return Tensor::wrap(data, shape, DType::bf16, part.mapping);
    default: {
      const int64_t rows = shape_numel(shape) / t->dims[0];
      return Tensor::wrap(data, {rows, int64_t(t->bytes) / rows}, DType::u8, part.mapping);
    }
  }
}

}  // namespace kiln
