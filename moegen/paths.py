"""Where moegen's data lives.  In a source checkout (and an editable install) configs/ and templates/
sit beside the package; a wheel carries them inside it (pyproject.toml maps them to moegen.configs
and moegen.templates), so both layouts resolve here and nothing else looks up a directory."""
from __future__ import annotations

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
