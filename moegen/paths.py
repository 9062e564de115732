"""Where moegen's data lives.  In a source checkout (and an editable install) configs/ and templates/
sit beside the package; a wheel carries them inside it (pyproject.toml maps them to moegen.configs
and moegen.templates), so both layouts resolve here and nothing else looks up a directory."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_CHECKOUT_DIR = PACKAGE_DIR.parent


def data_dir(name: str) -> Path:
    inside = PACKAGE_DIR / name
    return inside if inside.is_dir() else _CHECKOUT_DIR / name


def installed_as_wheel() -> bool:
    return (PACKAGE_DIR / "templates").is_dir()


CONFIG_DIR = data_dir("configs")
TEMPLATE_DIR = data_dir("templates")
# Builds go to the checkout's generated/; an installed package writes under the working directory,
# never into site-packages.
DEFAULT_OUT = Path("generated") if installed_as_wheel() else _CHECKOUT_DIR / "generated"


def read_small_file(path: Path, limit: int = 64 << 20) -> bytes:
    """A regular file's bytes, up to `limit`: a FIFO or device would block or never end, so it is refused
    (an OSError, like any unreadable file, whose strerror says what was expected)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory, expected a file", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket), expected a file", str(path))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes, expected at most {limit}", str(path))
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)
    finally:
        os.close(fd)


def blocking_file(path: Path, include_self: bool = False) -> Path | None:
    """The first of path's parents (and path itself, with include_self) that exists and is not a
    directory: what keeps a file from being written at path."""
    candidates = (path, *path.parents) if include_self else path.parents
    return next((a for a in candidates if a.exists() and not a.is_dir()), None)


def unwritable_dir(path: Path, include_self: bool = False) -> Path | None:
    """The nearest existing directory among path's parents (and path itself, with include_self), if
    this process may not create entries in it: writes there go through a temporary file and a rename."""
    candidates = (path, *path.parents) if include_self else path.parents
    nearest = next((a for a in candidates if a.is_dir()), None)
    return nearest if nearest is not None and not os.access(nearest, os.W_OK | os.X_OK) else None
