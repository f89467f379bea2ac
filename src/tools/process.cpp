// SPDX-License-Identifier: Apache-2.0
#include "tools/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "dpa/error.hpp"

extern char** environ;

namespace dpa::tools {

Process::Process(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const int spawned = posix_spawn(&pid_, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawned != 0) {
    close(pipe_fds[0]);
    throw Error("cannot start " + argv[0] + ": " + std::strerror(spawned));
  }
  stdout_fd_ = pipe_fds[0];
  fcntl(stdout_fd_, F_SETFL, fcntl(stdout_fd_, F_GETFL) | O_NONBLOCK);
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
}

Process::Process(Process&& other) noexcept
    : pid_(other.pid_),
      pidfd_(other.pidfd_),
      stdout_fd_(other.stdout_fd_),
      exit_code_(other.exit_code_),
      output_(std::move(other.output_)) {
  other.pid_ = -1;
  other.pidfd_ = -1;
  other.stdout_fd_ = -1;
}

Process::~Process() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (pidfd_ >= 0) close(pidfd_);
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

void Process::signal(int signal_number) const {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, signal_number);
}

void Process::drain_output() {
  std::array<char, 4096> buffer;
  while (stdout_fd_ >= 0) {
    const ssize_t n = read(stdout_fd_, buffer.data(), buffer.size());
    if (n <= 0) break;
    output_.append(buffer.data(), static_cast<std::size_t>(n));
  }
}

std::optional<int> Process::wait_until(std::chrono::steady_clock::time_point deadline) {
  while (!exit_code_) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      drain_output();
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    // Sleep until the child writes or exits (pidfd becomes readable on exit).
    std::array<pollfd, 2> fds{{{stdout_fd_, POLLIN, 0}, {pidfd_, POLLIN, 0}}};
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    poll(fds.data(), pidfd_ >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(wait_ms + 1, 100)));
    drain_output();
  }
  return exit_code_;
}

std::vector<std::optional<int>> wait_all(std::vector<Process>& processes,
                                         std::chrono::steady_clock::time_point deadline) {
  std::vector<std::optional<int>> codes;
  for (Process& process : processes) {
    std::optional<int> code = process.wait_until(deadline);
    if (!code) process.signal(SIGKILL);
    codes.push_back(code);
  }
  return codes;
}

std::string executable_directory() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

}  // namespace dpa::tools
