"""The notebook's kernel in the submission's sandbox (`box.py`): nbgrader and nbclient stay in the grader's
process, the kernel alone runs in the sandbox, and they talk over unix sockets (jupyter_client's `ipc` transport)
in the sandbox's runtime folder, the way a kernel in a network namespace can be reached.

The grading process puts the sandbox's description (`Sandbox.describe`) in the environment variable
SPECDEC_KERNEL_SANDBOX of nbgrader's process; `GuardedExecute` then starts its kernel with `SandboxedKernelManager`.
"""

from __future__ import annotations

import os

from jupyter_client import AsyncKernelManager

from ..core.waits import OMP_WAIT
from .box import Sandbox

SANDBOX_ENV = "SPECDEC_KERNEL_SANDBOX"
KERNEL_ENV = ("PATH", "LANG", "OMP_NUM_THREADS", "MKL_NUM_THREADS", OMP_WAIT)  # and SPECDEC_*


def sandbox_description() -> str | None:
    return os.environ.get(SANDBOX_ENV) or None


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel started in the sandbox that SPECDEC_KERNEL_SANDBOX describes, its channels unix sockets there."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.box = Sandbox.attach(sandbox_description())
        self.transport = "ipc"
        self.ip = str(self.box.runtime / "kernel")
        self.connection_file = str(self.box.runtime / "kernel.json")

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        # jupyter_client has written the connection file (0600, the grader's) by now: the kernel must read it.
        if self.box.uid is not None:
            os.chown(self.connection_file, self.box.uid, self.box.uid)
        argv = super().format_kernel_cmd(extra_arguments)
        env = {k: v for k, v in os.environ.items() if k in KERNEL_ENV or k.startswith("SPECDEC_")}
        for private in (SANDBOX_ENV, "SPECDEC_RUN_RECORD"):  # the grader's paths
            env.pop(private, None)
        return self.box.command(argv, env)

    @property
    def sandboxed_returncode(self) -> int | None:
        """The kernel's exit status as its own: bubblewrap exits 128 + N for a child killed by signal N."""
        process = getattr(self.provisioner, "process", None)
        code = None if process is None else process.poll()
        if code is not None and self.box.isolation == "bwrap" and code > 128:
            return -(code - 128)
        return code
