"""A node of :class:`discovm.SocketSession`: ``python -m discovm.node HOST PORT WORKERS [--rank
R]`` (Disco's arguments) joins the controller listening at ``HOST:PORT``, proves it holds
``DISCOVM_SESSION_TOKEN``, starts ``WORKERS`` worker processes running ``python -m
discovm.worker`` with this interpreter, and relays their work until the controller shuts the
session down. The workers import what the controller's session asks for (its
``entrypoint``, TVM's worker module), which the node learns once the controller proved it holds
the secret. The rank, when not given, comes from the launcher's environment (``SLURM_PROCID``,
``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``RANK``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ._library import module
from .session import WORKER_MODULE


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the node; returns the exit status (0 once the session shut down, 1 when the
    controller was lost, 2 for bad arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(module().node_main(args, sys.executable, ["-m", WORKER_MODULE]))
    except ValueError as error:
        print(f"discovm.node: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - the node's end, said on stderr
        print(f"discovm.node: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
