# SPDX-License-Identifier: Apache-2.0
"""Entry point inside bfshell (`run_bfshell.sh -b`), where the global `bfrt` exists.

    DPA_CONFIG=configs/netberg.json DPA_DEFINES=<install>/dpa_config.p4 DPA_COMMAND=run \
        $SDE/run_bfshell.sh -b <install>/controller/dpa_bfshell.py

DPA_COMMAND: `run` (set the switch up, then serve JOINs until interrupted), `setup`, `reset`
(clear every table, register and counter of the program, then set it up again), `counters`.
"""
import logging
import os
import sys
import time

from . import config as cfg
from . import counters
from .controller import Controller
from .cpu_port import CpuPort

COMMANDS = ("run", "setup", "reset", "counters")


def _environment(name):
    value = os.environ.get(name)
    if not value:
        raise cfg.ConfigError("%s: not set (see p4/controller/dpa_controller/bfshell_entry.py)" % name)
    return value


def main(bfrt):
    logging.basicConfig(level=logging.INFO, format="dpa-controller: %(message)s")
    command = os.environ.get("DPA_COMMAND", "run")
    if command not in COMMANDS:
        raise cfg.ConfigError("DPA_COMMAND: %r is not one of %s" % (command, ", ".join(COMMANDS)))
    with open(_environment("DPA_CONFIG")) as config_file, open(_environment("DPA_DEFINES")) as defines:
        config = cfg.load(config_file.read(), defines.read())

    if command == "counters":
        controller = Controller(bfrt, config, send_frame=None, clock_ns=time.monotonic_ns)
        print(counters.render(counters.replies(controller.program), {}))
        return
    cpu = CpuPort(config.cpu_interface) if command == "run" else None
    controller = Controller(bfrt, config, send_frame=cpu.send if cpu else None,
                            clock_ns=time.monotonic_ns)
    if command == "reset":
        controller.reset()
    controller.setup()
    logging.info("%s: %d sessions set up", config.name, len(config.sessions))
    if cpu is None:
        return
    try:
        while True:
            frame = cpu.receive(timeout_s=1.0)
            if frame is not None:
                controller.handle_frame(frame)
            controller.poll()
    except KeyboardInterrupt:
        pass
    finally:
        cpu.close()


if __name__ == "__main__":
    sys.exit("run this module inside bfshell: see its docstring")
