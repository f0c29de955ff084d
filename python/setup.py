"""Builds the discovm wheel: the Python package, with the C library built from the Rust crate at
the repository's root, its headers, its pkg-config file and its CMake package inside it
(``discovm/lib/`` and ``discovm/include/``, laid out as ``make install`` lays out a prefix).

Those files come from ``make install-relocatable``: the build and the files of ``make install``
(release settings, built in ``target/dist``, or ``$CARGO_TARGET_DIR/dist``), so building needs a
checkout of the repository with ``python/`` inside it, cargo and make. An editable install
(``pip install -e``) builds nothing: it is for working on the Python code, with
``DISCOVM_LIBRARY`` naming a library built by cargo. The metadata is in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.errors import ExecError, FileError

REPOSITORY = Path(__file__).resolve().parent.parent


def install_library_files(package_dir: Path) -> None:
    """Builds the library and puts it, its headers, its pkg-config file and its CMake package
    into ``package_dir`` (the ``discovm`` package being built)."""
    for needed in ("Cargo.toml", "Makefile"):
        if not (REPOSITORY / needed).is_file():
            raise FileError(
                f"{REPOSITORY / needed} not found: the discovm wheel is built from a checkout of "
                "the repository (pip install ./python at its root), which holds the Rust crate"
            )
    # Only this build's files: none left from an earlier build in the same directory.
    for staged in ("lib", "include"):
        shutil.rmtree(package_dir / staged, ignore_errors=True)
    make = os.environ.get("MAKE", "make")
    command = [make, "-C", str(REPOSITORY), "install-relocatable", f"STAGEDIR={package_dir}"]
    print("building the discovm library:", " ".join(command), flush=True)
    try:
        subprocess.run(command, check=True)
    except FileNotFoundError as e:
        raise ExecError(f"cannot run {make!r} ({e}): building discovm needs make and cargo") from e
    except subprocess.CalledProcessError as e:
        raise ExecError(
            f"building the discovm library failed ({' '.join(command)} exited with "
            f"{e.returncode}; its output is above). It needs cargo (Rust 1.88 or newer), make "
            "and bash."
        ) from e


class BuildPyWithLibrary(build_py):
    """``build_py``, then the library and its files into the built package (not in editable
    mode, which uses the sources in place)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            install_library_files(Path(self.build_lib).resolve() / "discovm")


class DistributionWithLibrary(Distribution):
    """A distribution that holds compiled code, so it installs as one for this platform."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for this platform that any Python 3 can use: the library does not link Python."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    distclass=DistributionWithLibrary,
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
)
