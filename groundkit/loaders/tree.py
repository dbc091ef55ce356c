"""A directory tree read without ever leaving it.

Every file is opened from a descriptor of the base directory, one path component at a time,
with ``O_NOFOLLOW``: a symlink anywhere below the base is never followed (it is reported, with
whether its target lies outside), a ``..`` component is refused, and nothing outside the base
is opened or stat'ed. A file is read only if it is a regular file (not a FIFO, device or
socket: those are opened non-blocking, then refused) with one link, and only up to the size
cap.

A hard link is a second name of the same file, and nothing inside the base can tell where the
other name lies: a link to a file outside the base (a key, a token file) looks like any other
file. So a regular file with more than one link is not read, whether the walk lists it or the
open finds it (the check is on the opened descriptor, so a link made after the walk is caught).
Comparing device and inode numbers against the rest of the tree would only find links whose
other name is inside it, which are the harmless ones.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from groundkit.errors import InvalidArgument
from groundkit.loaders import Skipped

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass
class Listing:
    """What a walk found: files to load (relative paths, in a stable order) and entries it
    will not read, with why."""

    files: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidArgument(f"{rel!r}: '..' is not allowed in a path under the base")
    return parts


def _hard_link_reason(links: int) -> str:
    return (f"hard link ({links} names for one file; not read: another name may lie outside the base, "
            "copy the file to load it)")


class Tree:
    """The base directory, held open by descriptor for the life of the object."""

    def __init__(self, base: str) -> None:
        self.named = os.path.abspath(base)
        self.base = os.path.realpath(base)
        try:
            self._fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise InvalidArgument(f"cannot open the base directory {self.base}: {exc.strerror}") from None

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def relative(self, path: str) -> str:
        """``path`` relative to the base ('' for the base itself, however named), lexically
        where it is spelled under the base (the walk then opens each component with
        O_NOFOLLOW, so nothing below the base is resolved here); InvalidArgument if it lies
        outside."""
        absolute = os.path.abspath(path)
        for root in (self.named, self.base):
            if absolute == root:
                return ""
            if absolute.startswith(root.rstrip("/") + "/"):
                return absolute[len(root.rstrip("/")) + 1:]
        # Spelled through a symlink outside the base (the user's own path): resolve that part.
        if os.path.realpath(absolute) == self.base:
            return ""
        resolved = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
        if resolved.startswith(self.base.rstrip("/") + "/"):
            return resolved[len(self.base.rstrip("/")) + 1:]
        raise InvalidArgument(f"{path} is not inside the base directory {self.base}")

    @contextmanager
    def _dir(self, parts: list[str]) -> Iterator[int]:
        """A descriptor of the directory base/parts, reached without following any symlink."""
        fd = os.dup(self._fd)
        try:
            for part in parts:
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise Skipped(f"cannot open directory {part!r}: {exc.strerror}"
                                  " (a symlink is never followed)") from None
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def _symlink_reason(self, dir_fd: int, rel_dir: str, name: str) -> str:
        """Why a symlink is passed over; where its target lies is judged from its text alone
        (nothing it points at is looked at)."""
        target = os.readlink(name, dir_fd=dir_fd)
        resolved = os.path.normpath(os.path.join(self.base, rel_dir, target))  # an absolute target wins
        if resolved != self.base and not resolved.startswith(self.base.rstrip("/") + "/"):
            return "symlink to outside the base (not followed)"
        return "symlink (not followed; a target inside the base is loaded under its own path)"

    def walk(self, start: str = "") -> Listing:
        """Files under base/start (or start itself, if a file), depth first, names sorted.
        Names starting with a dot (.git, .DS_Store) are passed over. InvalidArgument (the
        reason alone) if start is a symlink, a FIFO, a device or a socket."""
        listing = Listing()
        parts = _parts(start)
        if parts and self._start_is_file(parts):
            listing.files.append("/".join(parts))
            return listing
        self._walk_dir("/".join(parts), listing)
        return listing

    def _start_is_file(self, parts: list[str]) -> bool:
        """Whether base/parts is a regular file (False: a directory); InvalidArgument if it
        is neither, or a symlink, or lies below one."""
        try:
            with self._dir(parts[:-1]) as fd:
                try:
                    st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
                except OSError as exc:
                    raise InvalidArgument(exc.strerror or "cannot stat") from None
                if stat.S_ISLNK(st.st_mode):
                    raise InvalidArgument(self._symlink_reason(fd, "/".join(parts[:-1]), parts[-1]))
        except Skipped as exc:
            raise InvalidArgument(exc.reason) from None
        if stat.S_ISDIR(st.st_mode):
            return False
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgument("not a regular file (a FIFO, device or socket)")
        return True

    def _walk_dir(self, rel_dir: str, listing: Listing) -> None:
        pending = [rel_dir]
        while pending:
            current = pending.pop()
            try:
                with self._dir(_parts(current)) as fd, os.scandir(fd) as it:
                    entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
                    subdirs = []
                    for e in entries:
                        rel = f"{current}/{e.name}" if current else e.name
                        if e.is_symlink():
                            listing.skipped.append((rel, self._symlink_reason(fd, current, e.name)))
                        elif e.is_dir(follow_symlinks=False):
                            subdirs.append(rel)
                        elif e.is_file(follow_symlinks=False):
                            links = e.stat(follow_symlinks=False).st_nlink
                            if links > 1:
                                listing.skipped.append((rel, _hard_link_reason(links)))
                            else:
                                listing.files.append(rel)
                        else:
                            listing.skipped.append((rel, "not a regular file (a FIFO, device or socket)"))
            except Skipped as exc:
                listing.skipped.append((current, exc.reason))
                continue
            except OSError as exc:
                listing.skipped.append((current, f"cannot list: {exc.strerror}"))
                continue
            pending.extend(reversed(subdirs))
        listing.files.sort(key=lambda p: p.split("/"))

    @contextmanager
    def open(self, rel: str, max_bytes: int | None = None) -> Iterator[tuple[int, int]]:
        """(descriptor, size) of the regular file base/rel, opened without following a symlink;
        :class:`Skipped` for anything else, or a file over ``max_bytes``."""
        parts = _parts(rel)
        with self._dir(parts[:-1]) as dir_fd:
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                raise Skipped(f"cannot open: {exc.strerror} (a symlink is never followed)") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Skipped("not a regular file (a FIFO, device or socket)")
            if st.st_nlink > 1:
                raise Skipped(_hard_link_reason(st.st_nlink))
            if max_bytes is not None and st.st_size > max_bytes:
                raise Skipped(f"{st.st_size} bytes, over --max-bytes {max_bytes}")
            yield fd, st.st_size
        finally:
            os.close(fd)

    def read(self, rel: str, max_bytes: int) -> bytes:
        """The bytes of base/rel, at most ``max_bytes`` (:class:`Skipped` past it, even for a
        file that grows while it is read)."""
        with self.open(rel, max_bytes) as (fd, _size):
            chunks = []
            left = max_bytes + 1
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
        if len(data) > max_bytes:
            raise Skipped(f"over --max-bytes {max_bytes} (it grew while read)")
        return data
