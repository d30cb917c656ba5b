// The ELF header, the program header table with each segment's file bytes,
// and the section header table with each section's file bytes, each checked
// to lie inside the file (elf_check.h). Reads with pread(2) only: nothing is
// mapped, so a short file cannot fault here.
#include "core/plugin_host/elf_check.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

namespace dscore::plugin_host {
namespace {

constexpr unsigned char kHostData =
    std::endian::native == std::endian::little ? ELFDATA2LSB : ELFDATA2MSB;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads size bytes at offset (the caller checked they lie inside the file).
Status read_at(int fd, uint64_t offset, void* out, size_t size) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(std::string("cannot read it: ") + std::strerror(errno));
    if (n == 0) return io_error("it became shorter while being read; reinstall or rebuild it");
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// `what` ends in its verb: "section headers end", "segment 2 ends".
Status truncated(const std::string& what, uint64_t end, uint64_t file_size) {
  return failed_precondition("truncated ELF: " + what + " at byte " + std::to_string(end) +
                             " but the file has " + std::to_string(file_size) +
                             " bytes; reinstall or rebuild it (an interrupted copy or a full "
                             "disk leaves a file like this)");
}

// offset + count * entry_size, or UINT64_MAX when that overflows.
uint64_t table_end(uint64_t offset, uint64_t count, uint64_t entry_size) {
  uint64_t bytes = 0, end = 0;
  if (__builtin_mul_overflow(count, entry_size, &bytes) ||
      __builtin_add_overflow(offset, bytes, &end))
    return UINT64_MAX;
  return end;
}

// Reads a table of `count` entries of T at `offset`, after checking that it
// lies inside the file.
template <typename T>
Status read_table(int fd, uint64_t file_size, const std::string& what, uint64_t offset,
                  uint64_t count, std::vector<T>* out) {
  const uint64_t end = table_end(offset, count, sizeof(T));
  if (end > file_size) return truncated(what, end, file_size);
  out->resize(count);
  return read_at(fd, offset, out->data(), count * sizeof(T));
}

}  // namespace

Status check_elf_file(const std::string& path) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::Ok();  // the loader reports why it cannot open it
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return Status::Ok();
  const auto file_size = static_cast<uint64_t>(st.st_size);

  unsigned char ident[EI_NIDENT] = {};
  if (file_size < sizeof ident) return Status::Ok();  // the loader: "file too short"
  if (Status s = read_at(fd.get(), 0, ident, sizeof ident); !s.ok()) return s;
  // Not ELF, or an ELF the loader refuses by its identification alone.
  if (std::memcmp(ident, ELFMAG, SELFMAG) != 0 || ident[EI_CLASS] != ELFCLASS64 ||
      ident[EI_DATA] != kHostData)
    return Status::Ok();

  Elf64_Ehdr eh{};
  if (file_size < sizeof eh) return truncated("the ELF header ends", sizeof eh, file_size);
  if (Status s = read_at(fd.get(), 0, &eh, sizeof eh); !s.ok()) return s;
  // Entry sizes other than this host's: the loader refuses them before mapping.
  if ((eh.e_phnum > 0 && eh.e_phentsize != sizeof(Elf64_Phdr)) ||
      (eh.e_shoff != 0 && eh.e_shentsize != sizeof(Elf64_Shdr)))
    return Status::Ok();

  std::vector<Elf64_Phdr> segments;
  if (Status s =
          read_table(fd.get(), file_size, "program headers end", eh.e_phoff, eh.e_phnum, &segments);
      !s.ok())
    return s;

  std::vector<Elf64_Shdr> sections;
  if (eh.e_shoff != 0) {
    // More than SHN_LORESERVE sections: e_shnum is 0 and section 0's
    // sh_size holds the count.
    uint64_t count = eh.e_shnum;
    if (count == 0) {
      Elf64_Shdr first{};
      const uint64_t end = table_end(eh.e_shoff, 1, sizeof first);
      if (end > file_size) return truncated("section headers end", end, file_size);
      if (Status s = read_at(fd.get(), eh.e_shoff, &first, sizeof first); !s.ok()) return s;
      count = first.sh_size;
    }
    if (Status s =
            read_table(fd.get(), file_size, "section headers end", eh.e_shoff, count, &sections);
        !s.ok())
      return s;
  }

  for (size_t i = 0; i < segments.size(); ++i) {
    const uint64_t end = table_end(segments[i].p_offset, 1, segments[i].p_filesz);
    if (segments[i].p_filesz > 0 && end > file_size)
      return truncated("segment " + std::to_string(i) + " ends", end, file_size);
  }
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].sh_type == SHT_NOBITS || sections[i].sh_size == 0) continue;
    const uint64_t end = table_end(sections[i].sh_offset, 1, sections[i].sh_size);
    if (end > file_size) return truncated("section " + std::to_string(i) + " ends", end, file_size);
  }
  return Status::Ok();
}

}  // namespace dscore::plugin_host
