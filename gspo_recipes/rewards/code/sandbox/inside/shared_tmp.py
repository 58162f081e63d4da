"""/tmp shared by the test and the program: what one side changed under /tmp crosses with each call and its reply.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/inside/shared_tmp.py.
"""

SHARED_TOP = "/tmp"  # each side's own: the judge's and the program's sandboxes each mount a private /tmp
MAX_SHARED_BYTES = 4 << 20  # file contents, each way, each call (base64 keeps a message under the wire's 8 MiB)
MAX_SHARED_ENTRIES = 2000
_ENTRY_LENGTHS = {"d": 3, "f": 4, "x": 2}  # the entries `shared_tmp_changes` makes, by kind
_SUMMED_BYTES = 1 << 18  # files up to this size are told apart by their contents too (tmpfs times are coarse)


def shared_tmp_scan(skip=()):
    """{path relative to SHARED_TOP: signature} of the directories and regular files under it, links not followed,
    read-only mounts (an interpreter bound under /tmp) not entered; `skip`: relative paths left out."""
    import binascii
    import os
    import stat

    found = {}
    pending = [("", os.lstat(SHARED_TOP).st_dev)]
    while pending and len(found) < MAX_SHARED_ENTRIES * 4:
        folder, device = pending.pop()
        try:
            listing = os.scandir(SHARED_TOP + "/" + folder if folder else SHARED_TOP)
        except OSError:
            continue
        with listing:
            entries = [entry for entry, _ in zip(listing, range(MAX_SHARED_ENTRIES * 4))]  # a flood is cut short
        for entry in entries:
            path = folder + "/" + entry.name if folder else entry.name
            if path in skip:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    if info.st_dev != device and os.statvfs(entry.path).f_flag & os.ST_RDONLY:
                        continue
                    found[path] = ("d", stat.S_IMODE(info.st_mode))
                    pending.append((path, info.st_dev))
                elif stat.S_ISREG(info.st_mode):
                    summed = 0
                    if info.st_size <= _SUMMED_BYTES:
                        with open(entry.path, "rb") as file:
                            summed = binascii.crc32(file.read())
                    found[path] = ("f", stat.S_IMODE(info.st_mode), info.st_ino, info.st_size, info.st_mtime_ns, summed)
            except OSError:
                continue
    return found


def shared_tmp_changes(seen, skip=()):
    """(entries, now): what changed under SHARED_TOP since `seen` (a scan), as entries for `shared_tmp_apply` on the
    other side, folders before what they hold and removals deepest first; `now` is the scan to pass next time. A file
    past MAX_SHARED_BYTES of this call's contents does not cross (and is not offered again until it changes)."""
    import binascii

    now = shared_tmp_scan(skip)
    entries, sent = [], 0
    for path in sorted(now):
        signature = now[path]
        if seen.get(path) == signature or len(entries) >= MAX_SHARED_ENTRIES:
            continue
        if signature[0] == "d":
            if seen.get(path, ("",))[0] != "d":
                entries.append(["d", path, signature[1]])
            continue
        try:
            with open(SHARED_TOP + "/" + path, "rb") as file:
                data = file.read(MAX_SHARED_BYTES - sent + 1)
        except OSError:
            continue
        if sent + len(data) > MAX_SHARED_BYTES:
            continue
        sent += len(data)
        entries.append(["f", path, signature[1], binascii.b2a_base64(data, newline=False).decode("ascii")])
    entries += [["x", path] for path in sorted(set(seen) - set(now), reverse=True)][:MAX_SHARED_ENTRIES]
    return entries, now


def shared_tmp_apply(entries, skip=()):
    """Make under SHARED_TOP what `entries` (the other side's `shared_tmp_changes`) describe. Entries come from the
    other sandbox: each is checked (a relative path of plain names, no link followed on the way); a malformed one
    raises ValueError, one the filesystem refuses is left out. Returns the scan that now holds."""
    import binascii
    import os

    if not isinstance(entries, list) or len(entries) > 2 * MAX_SHARED_ENTRIES:
        raise ValueError("shared files: not a list of entries")
    received = 0
    for entry in entries:
        # ["d", path, mode], ["f", path, mode, base64 contents], ["x", path]
        if not isinstance(entry, list) or not entry or _ENTRY_LENGTHS.get(str(entry[0])) != len(entry):
            raise ValueError("shared files: malformed entry")
        kind, path = entry[0], _checked_path(entry[1])
        if path in skip:
            continue
        full = SHARED_TOP + "/" + path
        mode = 0 if kind == "x" else entry[2]
        if type(mode) is not int or not 0 <= mode <= 0o7777:
            raise ValueError("shared files: malformed mode")
        if kind == "f":
            if not isinstance(entry[3], str):
                raise ValueError("shared files: malformed file")
            try:
                data = binascii.a2b_base64(entry[3].encode("ascii"))
            except (binascii.Error, UnicodeEncodeError):
                raise ValueError("shared files: malformed contents") from None
            received += len(data)
            if received > MAX_SHARED_BYTES:
                raise ValueError("shared files: more than MAX_SHARED_BYTES in one call")
        if not _plain_folder(os.path.dirname(full)):
            continue
        try:
            if kind == "d":
                if not os.path.isdir(full) or os.path.islink(full):
                    os.mkdir(full, mode & 0o777)
            elif kind == "f":
                descriptor = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode & 0o777)
                with open(descriptor, "wb") as file:
                    file.write(data)
            elif os.path.isdir(full) and not os.path.islink(full):
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            continue
    return shared_tmp_scan(skip)


def shared_path_is_safe(entry):
    """Whether the import path `entry` lies outside what the program can write to in the judge's /tmp: the judge
    imports nothing the program wrote."""
    import os

    if not os.path.isabs(entry):
        return False
    real = os.path.realpath(entry)
    if real != SHARED_TOP and not real.startswith(SHARED_TOP + "/"):
        return True
    try:
        return bool(os.statvfs(real).f_flag & os.ST_RDONLY)
    except OSError:
        return False  # not there yet: the program could make it


def _checked_path(path):
    if not isinstance(path, str) or not 0 < len(path) < 4096 or "\x00" in path or path.startswith("/"):
        raise ValueError("shared files: malformed path")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError("shared files: malformed path")
    return path


def _plain_folder(folder):
    """Whether `folder` is a directory reached from SHARED_TOP through no link."""
    import os

    return os.path.isdir(folder) and os.path.realpath(folder) == folder
