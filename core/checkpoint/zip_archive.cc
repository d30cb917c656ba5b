// The zip reader (zip_archive.h). Layout, from the format's specification
// (PKWARE APPNOTE): the end-of-central-directory record at the end of the
// file (after an optional comment) gives the central directory's offset and
// entry count, or 0xffffffff / 0xffff where the zip64 record beside it
// holds the real values; each central entry names its local header, after
// which (30 bytes, the name and the local extra field) the data starts.
#include "core/checkpoint/zip_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/checkpoint/durable_file.h"

namespace dscore::checkpoint {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint64_t kMaxEntries = 1u << 24;

uint64_t le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Result<int> open_readonly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return not_found(path + ": no such file");
  if (fd < 0) return file_error("cannot open", path, errno);
  return fd;
}

// The zip64 extra field (id 1) of a central entry: the 8-byte values of
// those of size, compressed size and offset that the entry marks 0xffffffff.
Status apply_zip64_extra(const std::string& where, const char* extra, size_t length, uint64_t* size,
                         uint64_t* compressed, uint64_t* offset) {
  for (size_t at = 0; at + 4 <= length;) {
    const uint64_t id = le(extra + at, 2), bytes = le(extra + at + 2, 2);
    if (at + 4 + bytes > length) break;
    if (id == 1) {
      const char* p = extra + at + 4;
      size_t left = bytes;
      for (uint64_t* field : {size, compressed, offset}) {
        if (*field != 0xffffffffu) continue;
        if (left < 8) return data_loss(where + ": a zip64 field is cut short");
        *field = le(p, 8);
        p += 8;
        left -= 8;
      }
      return Status::Ok();
    }
    at += 4 + bytes;
  }
  if (*size == 0xffffffffu || *compressed == 0xffffffffu || *offset == 0xffffffffu)
    return data_loss(where + ": the entry needs a zip64 field and has none");
  return Status::Ok();
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && out.size() < 200; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (out.size() >= 200) out += "...";
  return out;
}

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < bytes; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

Result<ZipArchive> ZipArchive::open(const std::string& path) {
  Fd file;
  DSCORE_ASSIGN_OR_RETURN(file.fd, open_readonly(path));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) return file_error("cannot stat", path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const std::string not_zip =
      path +
      ": not a zip archive (no end-of-central-directory record): the file is truncated or "
      "is not a torch.save file";
  if (size < 22) return data_loss(not_zip);
  // The record is 22 bytes plus a comment of up to 65535.
  const uint64_t tail_bytes = std::min<uint64_t>(size, 22 + 65535);
  std::string tail(tail_bytes, '\0');
  DSCORE_RETURN_IF_ERROR(pread_fully(file.fd, path, size - tail_bytes, tail_bytes, tail.data()));
  int64_t eocd = -1;
  for (int64_t at = static_cast<int64_t>(tail_bytes) - 22; at >= 0; --at)
    if (le(tail.data() + at, 4) == kEndOfDirectory &&
        static_cast<uint64_t>(at) + 22 + le(tail.data() + at + 20, 2) == tail_bytes) {
      eocd = at;
      break;
    }
  if (eocd < 0) return data_loss(not_zip);
  const char* e = tail.data() + eocd;
  if (le(e + 4, 2) != 0 || le(e + 6, 2) != 0)
    return unimplemented(path + ": a multi-disk zip archive; join it into one file");
  uint64_t count = le(e + 10, 2), dir_size = le(e + 12, 4), dir_offset = le(e + 16, 4);
  const uint64_t eocd_offset = size - tail_bytes + static_cast<uint64_t>(eocd);
  if (count == 0xffff || dir_size == 0xffffffffu || dir_offset == 0xffffffffu) {
    char locator[20];
    if (eocd_offset < 20) return data_loss(path + ": the zip64 locator is missing");
    DSCORE_RETURN_IF_ERROR(pread_fully(file.fd, path, eocd_offset - 20, 20, locator));
    if (le(locator, 4) != kZip64Locator) return data_loss(path + ": the zip64 locator is missing");
    const uint64_t record_offset = le(locator + 8, 8);
    char record[56];
    if (record_offset + 56 > size) return data_loss(path + ": the zip64 record is past the end");
    DSCORE_RETURN_IF_ERROR(pread_fully(file.fd, path, record_offset, 56, record));
    if (le(record, 4) != kZip64EndOfDirectory)
      return data_loss(path + ": the zip64 end-of-central-directory record is damaged");
    count = le(record + 32, 8);
    dir_size = le(record + 40, 8);
    dir_offset = le(record + 48, 8);
  }
  if (dir_offset + dir_size > size || count > kMaxEntries || dir_size < count * 46)
    return data_loss(path + ": the central directory (" + std::to_string(count) +
                     " entries at byte " + std::to_string(dir_offset) +
                     ") does not fit in the file: it is truncated or damaged");
  std::string dir(dir_size, '\0');
  DSCORE_RETURN_IF_ERROR(pread_fully(file.fd, path, dir_offset, dir_size, dir.data()));

  ZipArchive archive;
  archive.path_ = path;
  size_t at = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (at + 46 > dir.size() || le(dir.data() + at, 4) != kDirectoryEntry)
      return data_loss(path + ": central directory entry " + std::to_string(i) + " is damaged");
    const char* c = dir.data() + at;
    const uint64_t flags = le(c + 8, 2), method = le(c + 10, 2);
    uint64_t compressed = le(c + 20, 4), entry_size = le(c + 24, 4), local = le(c + 42, 4);
    const size_t name_len = le(c + 28, 2), extra_len = le(c + 30, 2), comment_len = le(c + 32, 2);
    if (at + 46 + name_len + extra_len + comment_len > dir.size())
      return data_loss(path + ": central directory entry " + std::to_string(i) + " is cut short");
    ZipEntry entry;
    entry.name.assign(c + 46, name_len);
    entry.crc32 = static_cast<uint32_t>(le(c + 16, 4));
    const std::string where = path + ": entry " + printable(entry.name);
    if (flags & 1) return unimplemented(where + " is encrypted");
    if (method != 0)
      return unimplemented(where + " is compressed (method " + std::to_string(method) +
                           "); torch.save stores entries uncompressed: re-save it with torch.save");
    DSCORE_RETURN_IF_ERROR(
        apply_zip64_extra(where, c + 46 + name_len, extra_len, &entry_size, &compressed, &local));
    if (compressed != entry_size) return data_loss(where + ": stored sizes disagree");
    char header[30];
    if (local + 30 > size) return data_loss(where + ": its local header is past the end");
    DSCORE_RETURN_IF_ERROR(pread_fully(file.fd, path, local, 30, header));
    if (le(header, 4) != kLocalHeader) return data_loss(where + ": its local header is damaged");
    entry.data_offset = local + 30 + le(header + 26, 2) + le(header + 28, 2);
    entry.size = entry_size;
    if (entry.data_offset > size || entry.size > size - entry.data_offset)
      return data_loss(where + ": its " + std::to_string(entry.size) +
                       " bytes run past the end of the file: it is truncated");
    archive.entries_.push_back(std::move(entry));
    at += 46 + name_len + extra_len + comment_len;
  }
  return archive;
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  for (const ZipEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

Status ZipArchive::stream(const ZipEntry& entry,
                          const std::function<Status(const char*, size_t)>& sink) const {
  Fd file;
  DSCORE_ASSIGN_OR_RETURN(file.fd, open_readonly(path_));
  std::vector<char> chunk(std::min<uint64_t>(entry.size, 8u << 20));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < entry.size;) {
    const uint64_t n = std::min<uint64_t>(chunk.size(), entry.size - done);
    DSCORE_RETURN_IF_ERROR(pread_fully(file.fd, path_, entry.data_offset + done, n, chunk.data()));
    crc = crc32_update(crc, chunk.data(), n);
    DSCORE_RETURN_IF_ERROR(sink(chunk.data(), n));
    done += n;
  }
  if (crc != entry.crc32)
    return data_loss(path_ + ": entry " + printable(entry.name) +
                     " fails its CRC-32 check: the file is damaged");
  return Status::Ok();
}

Result<std::string> ZipArchive::read(const ZipEntry& entry) const {
  std::string out;
  out.reserve(entry.size);
  DSCORE_RETURN_IF_ERROR(stream(entry, [&](const char* data, size_t bytes) {
    out.append(data, bytes);
    return Status::Ok();
  }));
  return out;
}

}  // namespace dscore::checkpoint
