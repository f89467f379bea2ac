// SPDX-License-Identifier: Apache-2.0
// Where dpa-switch's control channel listens, and who is on the other end of a connection.
//
// A Unix-domain socket (a path) lets the file system decide who may connect: the socket file is
// created with its final mode inside a directory only the switch's user can enter, then moved into
// place, so no other user can reach it in between whatever the umask; a stale socket at the path
// is replaced, anything else there is left alone and refused. The peer's uid comes from the
// kernel (SO_PEERCRED). TCP (host:port) tells nothing about the peer beyond its address.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>

#include "common/unique_fd.hpp"
#include "dpa/host_port.hpp"

namespace dpa::sw {

// A path: a Unix-domain socket there; a HostPort: TCP (port 0: ephemeral).
using ControlAddress = std::variant<std::filesystem::path, HostPort>;

struct ControlPeer {
  int fd = -1;                    // non-blocking, close-on-exec; the caller owns it
  std::optional<uid_t> uid;       // Unix sockets: the connecting process's effective uid
  std::string name;               // "uid 1000" or "127.0.0.1:51234", for logs and replies
};

class ControlListener {
 public:
  // Listens at `address`; a Unix socket file gets `unix_mode` (0600: its owner only). Throws
  // dpa::Error naming the address and the reason when it cannot.
  ControlListener(const ControlAddress& address, mode_t unix_mode);
  ~ControlListener();  // closes, and removes the socket file if it is still the one it created
  ControlListener(const ControlListener&) = delete;
  ControlListener& operator=(const ControlListener&) = delete;

  [[nodiscard]] int fd() const { return fd_.get(); }
  [[nodiscard]] std::uint16_t port() const { return port_; }  // TCP: the bound port
  // "unix:PATH" or "HOST:PORT" with the bound port.
  [[nodiscard]] std::string where() const;

  // The next waiting connection, if any.
  std::optional<ControlPeer> accept() const;

 private:
  void listen_unix(const std::filesystem::path& path, mode_t mode);
  void listen_tcp(const HostPort& address);

  detail::UniqueFd fd_;
  std::optional<std::filesystem::path> unix_path_;
  dev_t socket_device_ = 0;  // of the socket file, to remove only that one at exit
  ino_t socket_inode_ = 0;
  std::string host_;
  std::uint16_t port_ = 0;
};

}  // namespace dpa::sw
