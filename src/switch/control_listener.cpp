// SPDX-License-Identifier: Apache-2.0
#include "switch/control_listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "common/unique_fd.hpp"
#include "dpa/error.hpp"

namespace dpa::sw {

namespace {

constexpr int kBacklog = 16;

std::string errno_text() { return std::strerror(errno); }

// A sockaddr_un for `path`; ConfigError when the path does not fit one.
sockaddr_un unix_address(const std::string& path, const std::string& target) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    throw ConfigError(fmt::format("control socket {}: a Unix socket path has 1 to {} bytes (a path of at most {} "
                                  "bytes, in a directory of its own, leaves room for the switch's staging name)",
                                  target, sizeof address.sun_path - 1, sizeof address.sun_path - 16));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// Whether a process listens on the Unix socket at `path` (a stale one refuses connections).
bool socket_in_use(const std::string& path) {
  const sockaddr_un address = unix_address(path, path);
  const dpa::detail::UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (probe.get() < 0) throw Error("control socket " + path + ": socket: " + errno_text());
  if (connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) return true;
  if (errno == ECONNREFUSED || errno == ENOENT) return false;
  if (errno == EAGAIN) return true;  // a full backlog: someone listens
  throw Error(fmt::format("control socket {}: cannot tell whether another process serves on it: {}", path,
                          errno_text()));
}

// A directory only this user can enter, removed with what is left in it when it goes.
struct PrivateDirectory {
  std::string path;
  explicit PrivateDirectory(const std::filesystem::path& parent) : path((parent / ".dpa-XXXXXX").string()) {
    if (mkdtemp(path.data()) == nullptr) {
      throw Error(fmt::format("control socket: cannot create a private directory in {}: {}", parent.string(),
                              errno_text()));
    }
  }
  ~PrivateDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  PrivateDirectory(const PrivateDirectory&) = delete;
  PrivateDirectory& operator=(const PrivateDirectory&) = delete;
};

}  // namespace

ControlListener::ControlListener(const ControlAddress& address, mode_t unix_mode) {
  if (const auto* path = std::get_if<std::filesystem::path>(&address)) {
    listen_unix(*path, unix_mode);
  } else {
    listen_tcp(std::get<HostPort>(address));
  }
}

void ControlListener::listen_unix(const std::filesystem::path& path, mode_t mode) {
  const std::string target = path.string();
  unix_address(target, target);  // the final path must fit too: clients connect to it
  struct stat existing {};
  if (lstat(target.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      throw Error(fmt::format("control socket {}: refusing to replace it, it exists and is not a socket", target));
    }
    if (socket_in_use(target)) {
      throw Error(fmt::format("control socket {}: another process serves on it (another dpa-switch?)", target));
    }
    if (unlink(target.c_str()) != 0 && errno != ENOENT) {
      throw Error(fmt::format("control socket {}: cannot remove the stale socket: {}", target, errno_text()));
    }
  } else if (errno != ENOENT) {
    throw Error(fmt::format("control socket {}: {}", target, errno_text()));
  }

  // Bound in a directory no one else can enter, given its mode there, then linked into place: no
  // other user ever reaches the socket with a wider mode, whatever the umask.
  const std::filesystem::path parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const PrivateDirectory staging_directory(parent);
  const std::string staging = staging_directory.path + "/s";
  const sockaddr_un address = unix_address(staging, target);
  dpa::detail::UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (listener.get() < 0) throw Error("control socket " + target + ": socket: " + errno_text());
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      chmod(staging.c_str(), mode) != 0 || listen(listener.get(), kBacklog) != 0) {
    throw Error(fmt::format("cannot serve the control channel on unix:{}: {}", target, errno_text()));
  }
  // link() fails if something appeared at the path meanwhile, where rename() would replace it.
  if (link(staging.c_str(), target.c_str()) != 0) {
    throw Error(fmt::format("cannot serve the control channel on unix:{}: {}", target, errno_text()));
  }
  struct stat created {};
  lstat(target.c_str(), &created);
  socket_device_ = created.st_dev;
  socket_inode_ = created.st_ino;
  unix_path_ = path;
  fd_ = std::move(listener);
}

void ControlListener::listen_tcp(const HostPort& where) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(where.port);
  if (inet_pton(AF_INET, where.host.c_str(), &address.sin_addr) != 1) {
    throw ConfigError("control channel host \"" + where.host + "\" is not an IPv4 address");
  }
  dpa::detail::UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const int on = 1;
  if (listener.get() < 0 || setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener.get(), kBacklog) != 0) {
    throw Error("cannot listen for control connections on " + where.to_string() + ": " + errno_text());
  }
  socklen_t length = sizeof address;
  getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length);
  host_ = where.host;
  port_ = ntohs(address.sin_port);
  fd_ = std::move(listener);
}

ControlListener::~ControlListener() {
  fd_ = detail::UniqueFd();  // closed before the socket file goes
  if (!unix_path_) return;
  // Only the socket this listener created: a later switch's, or the operator's file, stays.
  struct stat now {};
  if (lstat(unix_path_->c_str(), &now) == 0 && now.st_dev == socket_device_ && now.st_ino == socket_inode_) {
    unlink(unix_path_->c_str());
  }
}

std::string ControlListener::where() const {
  return unix_path_ ? "unix:" + unix_path_->string() : HostPort{host_, port_}.to_string();
}

std::optional<ControlPeer> ControlListener::accept() const {
  ControlPeer peer;
  peer.fd = accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (peer.fd < 0) return std::nullopt;
  if (unix_path_) {
    ucred credentials{};
    socklen_t length = sizeof credentials;
    if (getsockopt(peer.fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0) {
      peer.uid = credentials.uid;
      peer.name = fmt::format("uid {} (pid {})", credentials.uid, credentials.pid);
    } else {
      peer.name = "a process of unknown uid";
    }
  } else {
    sockaddr_in address{};
    socklen_t length = sizeof address;
    char host[INET_ADDRSTRLEN] = "?";
    if (getpeername(peer.fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      inet_ntop(AF_INET, &address.sin_addr, host, sizeof host);
    }
    peer.name = fmt::format("{}:{}", host, ntohs(address.sin_port));
  }
  return peer;
}

}  // namespace dpa::sw
