# SPDX-License-Identifier: Apache-2.0
"""Datagrams the kernel dropped on this process's UDP sockets (a full receive buffer): dpa's
engine sockets and, on the rank that embeds it, the switch's. With no loss injected, drops are
what turns into retransmissions (docs/configuration.md §6)."""

import os


def udp_drops():
    """Drops counted by the kernel on the UDP sockets this process holds now (Linux /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since listed
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    total = 0
    for table in ("/proc/self/net/udp", "/proc/self/net/udp6"):
        try:
            with open(table) as rows:
                next(rows)  # the header
                for row in rows:
                    # sl local rem st tx:rx tr:tm retrnsmt uid timeout inode ref pointer drops
                    fields = row.split()
                    if fields[9] in inodes:
                        total += int(fields[12])
        except OSError:
            continue
    return total
