# SPDX-License-Identifier: Apache-2.0
"""The CPU port as the controller sees it: a kernel network interface (bf_kpkt's bf_pci0 on
the ASIC, a veth on the tofino-model) read and written with a raw AF_PACKET socket."""
import select
import socket

ETH_P_ALL = 0x0003


class CpuPort:
    def __init__(self, interface):
        try:
            self.socket = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.socket.bind((interface, 0))
        except OSError as error:
            raise OSError("switch.cpu_interface %r: %s (is the kernel packet driver loaded, and "
                          "does the controller run as root?)" % (interface, error)) from None

    def send(self, frame):
        self.socket.send(frame)

    def receive(self, timeout_s):
        """One frame, or None after `timeout_s`."""
        ready, _, _ = select.select([self.socket], [], [], timeout_s)
        return self.socket.recv(65535) if ready else None

    def close(self):
        self.socket.close()
