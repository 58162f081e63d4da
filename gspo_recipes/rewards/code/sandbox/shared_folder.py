"""The one folder an attempt's program and its judge share: made on the host, bound at the same path in both.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/shared_folder.py.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading

from .inside import confine
from .isolation import WORKDIR_IN_BWRAP, is_root

# Where the folder is in both sandboxes: the working directory, TMPDIR and HOME of the program and of the judge.
SHARED_IN_SANDBOX = WORKDIR_IN_BWRAP
# Where a zygote's root holds this process's parent folder (read-write); each attempt binds its own folder from
# there at SHARED_IN_SANDBOX and then covers the parent (`confine.cover`), so no attempt sees another's folder.
PARENT_IN_ZYGOTE = "/.gspo-shared"
# As root, the parent is a tmpfs of this size (one attempt's folder at a time: each pool process judges one attempt
# at a time), so that what an attempt writes there is bounded in all, as each sandbox's own /tmp is.
SHARED_MB = 64
SHARED_INODES = 1 << 16

_lock = threading.Lock()
_parent: list[str] = []


def shared_parent() -> str:
    """This process's parent of attempts' folders, on the host (made on first use, removed at exit): as root a
    tmpfs of SHARED_MB, mode 0711 (no other user lists it); a user's, a folder of the host's temporary directory, 0700
    (a user can mount nothing the host sees: see docs/code-sandbox.md, "Limits")."""
    with _lock:
        if not _parent:
            _sweep_stale()
            path = tempfile.mkdtemp(prefix=f"gspo-shared-{os.getpid()}-")
            mounted = False
            if is_root():
                with contextlib.suppress(OSError):
                    flags = confine.MS_NOSUID | confine.MS_NODEV
                    confine.mount(
                        "tmpfs", path, "tmpfs", flags, f"size={SHARED_MB}m,nr_inodes={SHARED_INODES},mode=0711"
                    )
                    mounted = True
            os.chmod(path, 0o711 if is_root() else 0o700)
            _parent.append(path)
            atexit.register(_remove_parent, path, os.getpid(), mounted)
        return _parent[0]


def _sweep_stale() -> None:
    """Remove the parents (and, as root, unmount the tmpfs) that processes which are gone left behind: a pool process
    killed before its exit handlers ran (`_remove_parent`) leaves its own. A parent's name holds its process's pid."""
    with contextlib.suppress(OSError), os.scandir(tempfile.gettempdir()) as entries:
        for entry in entries:
            found = re.fullmatch(r"gspo-shared-(\d+)-\w+", entry.name)
            if found is None or int(found.group(1)) == os.getpid() or _alive(int(found.group(1))):
                continue
            if is_root():
                with contextlib.suppress(OSError):
                    confine.detach(entry.path)
            with contextlib.suppress(OSError):
                remove_tree(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's
    return True


def _remove_parent(path: str, owner: int, mounted: bool) -> None:
    if os.getpid() != owner:  # a forked child that exits normally leaves its parent's folder alone
        return
    if mounted:
        with contextlib.suppress(OSError):
            confine.detach(path)
    remove_tree(path)


def make_folder(uid: int) -> str:
    """A fresh, empty folder for one attempt under `shared_parent()`, owned by the attempt's `uid` (both its
    sandboxes run as that uid), mode 0700: its host path."""
    path = tempfile.mkdtemp(prefix="attempt-", dir=shared_parent())
    if is_root():
        os.chown(path, uid, uid)
    return path


def in_zygote(path: str) -> str:
    """Where a zygote's attempt finds the folder `path` (see PARENT_IN_ZYGOTE)."""
    return PARENT_IN_ZYGOTE + "/" + os.path.basename(path)


def remove_tree(path: str) -> None:
    """Remove `path` and everything in it, whatever the attempt left there: folders it made unreadable or
    unwritable, links (never followed), pipes, sockets. Called once both sandboxes of the attempt are gone."""
    if not os.path.lexists(path):
        return

    def unlock(function, failed, _):
        # A folder without write or search permission for its owner (a user's, where no capability overrides it):
        # give them back, and try again.
        parent = os.path.dirname(failed)
        with contextlib.suppress(OSError):
            for folder in (parent, failed):
                if stat.S_ISDIR(os.lstat(folder).st_mode):
                    os.chmod(folder, 0o700)
        with contextlib.suppress(OSError):
            if function in (os.rmdir, os.unlink):
                function(failed)
            elif stat.S_ISDIR(os.lstat(failed).st_mode):
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    shutil.rmtree(path, onerror=unlock)
    if os.path.lexists(path):  # a second pass after the first opened what it could
        shutil.rmtree(path, onerror=unlock)
