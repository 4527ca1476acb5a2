"""OpenVINO (and NNCF, which shares its telemetry) as vpunas uses them: offline, usage telemetry declined.

Unless a user has opted out, OpenVINO's model converter and NNCF send a usage event to Google Analytics for every
conversion: each event forks the whole process (torch included) to post it, waits for it, and a client id and a
usage counter are written under `~/intel`. A search converts hundreds of networks on a machine that is often
offline, and a forked copy of a process that traps SIGTERM prints a traceback when the sender gives up on it.
vpunas declines for its own process, as the user's opt-out would, and writes nothing.
"""
from __future__ import annotations

__all__ = ["openvino", "decline_telemetry"]


def decline_telemetry() -> None:
    """Make every OpenVINO telemetry consent check of this process answer "declined" (idempotent). Call it before
    `import nncf`, which checks once at import."""
    try:
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:  # without the package OpenVINO uses its own stub, which sends nothing
        return
    OptInChecker.check = lambda self, *args, **kwargs: ConsentCheckResult.DECLINED


def openvino():
    """The `openvino` module, with telemetry declined."""
    decline_telemetry()
    import openvino as ov

    return ov
