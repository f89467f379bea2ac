// SPDX-License-Identifier: Apache-2.0
#include "transport/shm/segment.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <random>
#include <system_error>
#include <unordered_map>

#include <fmt/format.h>

#include "dpa/error.hpp"

namespace dpa::transport::shm {

// One inbox entry (Vyukov's bounded queue): `sequence` says whose turn the cell is.
struct Cell {
  std::atomic<std::uint64_t> sequence;
  std::uint64_t descriptor;
};

struct SegmentLayout {
  static constexpr std::uint64_t kMagic = 0x6470612d73686d32;  // "dpa-shm2"

  std::atomic<std::uint64_t> magic;
  std::uint32_t port;
  std::uint32_t tag;
  std::uint32_t buffers;
  std::uint32_t max_payload;
  std::uint32_t ring;
  std::uint64_t stride;
  std::uint64_t buffers_offset;
  std::atomic<std::uint32_t> closed;
  alignas(64) std::atomic<std::uint32_t> wake_sequence;  // the futex word
  std::atomic<std::uint32_t> sleeping;
  alignas(64) std::atomic<std::uint64_t> enqueue_position;
  alignas(64) std::uint64_t dequeue_position;  // the owner's alone
  alignas(64) Cell cells[1];                   // `ring` of them
};

namespace {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work between processes");

constexpr std::size_t kCacheLine = 64;
constexpr std::uint16_t kFirstFreePort = 49152;

std::size_t round_up(std::size_t value, std::size_t to) { return (value + to - 1) / to * to; }
std::string error_text(int error) { return std::system_category().message(error); }

std::size_t cells_offset() { return offsetof(SegmentLayout, cells); }

// The tag a new segment of `port` gets. A peer keeps the segments of a port's earlier owners
// mapped while their packets may still be in its inbox (ShmQueue keeps 64), and tells the owners
// apart by the tag alone. A port this process owned before therefore gets the tag after its last
// one; a port new to this process a random one, which equals one of the 64 kept tags of another
// process's earlier owners about once in 67 million.
std::uint32_t next_tag(const ShmTransportConfig& config, std::uint32_t port) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::uint32_t> last_tags;
  std::lock_guard lock(mutex);
  const auto [entry, first] = last_tags.try_emplace(fmt::format("{}/{}/{}", config.directory, config.fabric, port));
  entry->second = first ? static_cast<std::uint32_t>(std::random_device{}()) : entry->second + 1;
  return entry->second;
}

std::size_t buffers_offset(const ShmTransportConfig& config) {
  return round_up(cells_offset() + std::size_t{config.ring} * sizeof(Cell), 4096);
}
std::size_t stride_of(const ShmTransportConfig& config) {
  return round_up(kCacheLine + config.max_payload, kCacheLine);
}
std::size_t total_bytes(const ShmTransportConfig& config) {
  return buffers_offset(config) + std::size_t{config.buffers} * stride_of(config);
}

long futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, value, timeout, nullptr, 0);
}

// Whether `fd`'s file is still the one named `path` (a takeover must not remove a newer one).
bool same_file(int fd, const std::string& path) {
  struct stat by_fd {};
  struct stat by_name {};
  return fstat(fd, &by_fd) == 0 && stat(path.c_str(), &by_name) == 0 && by_fd.st_ino == by_name.st_ino &&
         by_fd.st_dev == by_name.st_dev;
}

// Removes `path` if its owner is gone (nobody holds its lock); true when the name is free now.
bool remove_if_abandoned(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  bool removed = false;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    if (same_file(fd, path)) removed = unlink(path.c_str()) == 0;
    flock(fd, LOCK_UN);
  }
  close(fd);
  return removed;
}

// Removes the segments in `directory` whose owners died without closing them (a killed rank's):
// their space is reserved memory. Files still being created are left alone for a minute.
void remove_abandoned_segments(const std::string& directory) {
  std::error_code error;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("dpa-")) continue;
    if (name.find("-new-") != std::string::npos) {
      const auto written = std::filesystem::last_write_time(entry.path(), error);
      if (error || now - written < std::chrono::minutes(1)) continue;
    }
    remove_if_abandoned(entry.path().string());
  }
}

}  // namespace

std::string segment_path(const ShmTransportConfig& config, std::uint16_t port) {
  return fmt::format("{}/dpa-{}-{}", config.directory, config.fabric, port);
}

Segment::Segment(int fd, std::byte* base, std::size_t bytes, bool owner, std::string path)
    : fd_(fd), base_(base), bytes_(bytes), owner_(owner), path_(std::move(path)) {
  const SegmentLayout& header = layout();
  port_ = static_cast<std::uint16_t>(header.port);
  tag_ = header.tag;
  buffers_ = header.buffers;
  max_payload_ = header.max_payload;
  stride_ = header.stride;
  buffers_offset_ = header.buffers_offset;
  ring_mask_ = header.ring - 1;
  cells_ = layout().cells;
}

Segment::~Segment() {
  if (owner_) {
    layout().closed.store(1, std::memory_order_release);
    if (same_file(fd_.get(), path_)) unlink(path_.c_str());
  }
  munmap(base_, bytes_);  // fd_ closes after: that releases the owner's lock
}

std::unique_ptr<Segment> Segment::create(const ShmTransportConfig& config, std::uint16_t port) {
  remove_abandoned_segments(config.directory);
  const std::size_t bytes = total_bytes(config);
  const std::string temporary = fmt::format("{}/dpa-{}-new-{}-XXXXXX", config.directory, config.fabric, getpid());
  std::string name = temporary;
  const int fd = mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) {
    throw Error(fmt::format("shm.directory {}: cannot create a segment there: {}", config.directory,
                            error_text(errno)));
  }
  const auto fail = [&](const std::string& what) {
    close(fd);
    unlink(name.c_str());
    throw Error(what);
  };
  flock(fd, LOCK_EX);
  // Reserving the memory now turns a full tmpfs into this error rather than a SIGBUS later.
  if (const int error = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0) {
    fail(fmt::format("shm.directory {}: no room for a queue's {} MiB (shm.buffers {} x shm.max_payload {}): {}; "
                     "lower them or give the tmpfs more space",
                     config.directory, (bytes + (1 << 20) - 1) >> 20, config.buffers, config.max_payload,
                     error_text(error)));
  }
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) fail(fmt::format("shm: cannot map {} bytes of {}: {}", bytes, name, error_text(errno)));
  auto* base = static_cast<std::byte*>(mapped);
  auto* header = new (base) SegmentLayout;
  header->buffers = config.buffers;
  header->max_payload = config.max_payload;
  header->ring = config.ring;
  header->stride = stride_of(config);
  header->buffers_offset = buffers_offset(config);
  header->closed.store(0);
  header->wake_sequence.store(0);
  header->sleeping.store(0);
  header->enqueue_position.store(0);
  header->dequeue_position = 0;
  for (std::uint32_t i = 0; i < config.ring; ++i) {
    auto* cell = new (&header->cells[i]) Cell;
    cell->sequence.store(i, std::memory_order_relaxed);
  }

  // Publish under the port's name: link() fails if the name exists, so two creators never share it.
  const bool any_port = port == 0;
  const std::uint32_t span = 65536u - kFirstFreePort;
  // Each segment of this process starts the search one port further on, so the queues a rejoin
  // opens do not take the ports its previous ones just left (as new UDP sockets do not).
  static std::atomic<std::uint32_t> created{0};
  const std::uint32_t start = static_cast<std::uint32_t>(getpid()) * 7919u + created.fetch_add(1);
  std::uint32_t candidate = any_port ? kFirstFreePort + start % span : port;
  for (std::uint32_t attempt = 0;; ++attempt) {
    header->port = candidate;
    header->tag = next_tag(config, candidate);
    header->magic.store(SegmentLayout::kMagic, std::memory_order_release);
    const std::string path = segment_path(config, static_cast<std::uint16_t>(candidate));
    if (link(name.c_str(), path.c_str()) == 0) {
      unlink(name.c_str());
      return std::unique_ptr<Segment>(new Segment(fd, base, bytes, true, path));
    }
    const int error = errno;
    if (error != EEXIST) {
      munmap(base, bytes);
      fail(fmt::format("shm: cannot name segment {}: {}", path, error_text(error)));
    }
    if (remove_if_abandoned(path)) continue;  // its owner died: take the port over
    if (!any_port) {
      munmap(base, bytes);
      fail(fmt::format("shm port {} of fabric \"{}\" is in use by a live process ({})", candidate, config.fabric,
                       path));
    }
    if (attempt == span) {
      munmap(base, bytes);
      fail(fmt::format("shm fabric \"{}\": every port of {}..65535 is in use", config.fabric, kFirstFreePort));
    }
    candidate = candidate + 1 == 65536 ? kFirstFreePort : candidate + 1;
  }
}

std::unique_ptr<Segment> Segment::attach(const ShmTransportConfig& config, std::uint16_t port) {
  const std::string path = segment_path(config, port);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat status {};
  if (fstat(fd, &status) != 0 || static_cast<std::size_t>(status.st_size) < sizeof(SegmentLayout)) {
    close(fd);
    return nullptr;
  }
  const auto bytes = static_cast<std::size_t>(status.st_size);
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) {
    close(fd);
    return nullptr;
  }
  const auto* header = static_cast<const SegmentLayout*>(mapped);
  const std::size_t expected = header->buffers_offset + std::size_t{header->buffers} * header->stride;
  if (header->magic.load(std::memory_order_acquire) != SegmentLayout::kMagic || header->port != port ||
      expected > bytes || header->closed.load(std::memory_order_acquire) != 0) {
    munmap(mapped, bytes);
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<Segment>(new Segment(fd, static_cast<std::byte*>(mapped), bytes, false, path));
}

bool Segment::closed() const { return layout().closed.load(std::memory_order_acquire) != 0; }

bool Segment::push(std::uint64_t descriptor) {
  SegmentLayout& header = layout();
  std::uint64_t position = header.enqueue_position.load(std::memory_order_relaxed);
  for (;;) {
    Cell& cell = cells_[position & ring_mask_];
    const std::uint64_t sequence = cell.sequence.load(std::memory_order_acquire);
    const auto lag = static_cast<std::int64_t>(sequence - position);
    if (lag == 0) {
      if (header.enqueue_position.compare_exchange_weak(position, position + 1, std::memory_order_relaxed)) {
        cell.descriptor = descriptor;
        cell.sequence.store(position + 1, std::memory_order_release);
        return true;
      }
    } else if (lag < 0) {
      return false;  // full: the owner has not taken the packet a ring ago
    } else {
      position = header.enqueue_position.load(std::memory_order_relaxed);
    }
  }
}

bool Segment::holds_unread(std::uint64_t count) const {
  if (count == 0) return true;
  const std::uint64_t position = layout().enqueue_position.load(std::memory_order_acquire);
  if (position < count) return false;
  // FIFO: `count` packets are unread exactly when the one pushed `count` ago is.
  const std::uint64_t oldest = position - count;
  return cells_[oldest & ring_mask_].sequence.load(std::memory_order_acquire) == oldest + 1;
}

bool Segment::wake() {
  SegmentLayout& header = layout();
  // Pairs with the fence in wait(): either the owner sees the pushed cells, or this sees it asleep.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header.sleeping.load(std::memory_order_relaxed) == 0) return false;
  header.wake_sequence.fetch_add(1, std::memory_order_release);
  futex(header.wake_sequence, FUTEX_WAKE, 1, nullptr);
  return true;
}

std::size_t Segment::pop(std::span<std::uint64_t> out) {
  SegmentLayout& header = layout();
  std::uint64_t position = header.dequeue_position;
  std::size_t taken = 0;
  while (taken < out.size()) {
    Cell& cell = cells_[position & ring_mask_];
    if (cell.sequence.load(std::memory_order_acquire) != position + 1) break;
    out[taken++] = cell.descriptor;
    cell.sequence.store(position + ring_mask_ + 1, std::memory_order_release);
    ++position;
  }
  header.dequeue_position = position;
  return taken;
}

bool Segment::wait(std::chrono::nanoseconds timeout) {
  SegmentLayout& header = layout();
  const std::uint32_t seen = header.wake_sequence.load(std::memory_order_acquire);
  header.sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const Cell& next = cells_[header.dequeue_position & ring_mask_];
  bool slept = false;
  if (next.sequence.load(std::memory_order_acquire) != header.dequeue_position + 1) {
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
    const timespec limit{static_cast<time_t>(seconds.count()), static_cast<long>((timeout - seconds).count())};
    futex(header.wake_sequence, FUTEX_WAIT, seen, &limit);
    slept = true;
  }
  header.sleeping.store(0, std::memory_order_relaxed);
  return slept;
}

}  // namespace dpa::transport::shm
