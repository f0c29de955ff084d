"""Where the installed package keeps discovm's C library, headers, CMake package and pkg-config
file, for building C and C++ code against the same library Python uses (as
``tvm_ffi.libinfo`` does for tvm-ffi). The wheel lays them out inside the package as
``make install`` lays out a prefix::

    discovm/include/discovm.h, discovm_abi.h, discovm.hpp
    discovm/lib/libdiscovm.so (with libdiscovm.so.0, libdiscovm.so.0.1.0 and libdiscovm.a)
    discovm/lib/cmake/discovm/discovmConfig.cmake
    discovm/lib/pkgconfig/discovm.pc

The CMake package and the pkg-config file find the others relative to themselves::

    cmake -Ddiscovm_DIR="$(python -c 'import discovm; print(discovm.cmake_dir())')" ...
    PKG_CONFIG_PATH="$(python -c 'import discovm; print(discovm.pkgconfig_dir())')" \
        pkg-config --cflags --libs discovm
"""

from __future__ import annotations

from pathlib import Path

#: The package's directory, which the wheel's files are laid out under as under a prefix.
PACKAGE_DIR = Path(__file__).resolve().parent


def _packaged(relative: str, what: str) -> Path:
    path = PACKAGE_DIR / relative
    if not path.is_dir():
        raise FileNotFoundError(
            f"{what} is not in this installation of discovm ({path} does not exist). "
            "`pip install ./python` from the repository puts it there; an editable install "
            "(pip install -e) does not (use the repository's include/, or `make install`)."
        )
    return path


def include_dir() -> Path:
    """The directory of ``discovm.h``, ``discovm_abi.h`` and ``discovm.hpp``.

    Raises
    ------
    FileNotFoundError
        If this installation has none (an editable install); the message says where it looked.
    """
    return _packaged("include", "The C headers' directory")


def lib_dir() -> Path:
    """The directory of the shared library ``libdiscovm.so`` (the one this package loads
    unless ``DISCOVM_LIBRARY`` names another) and the static ``libdiscovm.a``.

    Raises
    ------
    FileNotFoundError
        If this installation has none (an editable install); the message says where it looked.
    """
    return _packaged("lib", "The library directory")


def cmake_dir() -> Path:
    """The directory of the CMake package (``discovmConfig.cmake``), for ``discovm_DIR``:
    ``find_package(discovm)`` then gives the targets ``discovm::discovm`` and
    ``discovm::discovm_static``.

    Raises
    ------
    FileNotFoundError
        If this installation has none (an editable install); the message says where it looked.
    """
    return _packaged("lib/cmake/discovm", "The CMake package")


def pkgconfig_dir() -> Path:
    """The directory of ``discovm.pc``, for ``PKG_CONFIG_PATH``.

    Raises
    ------
    FileNotFoundError
        If this installation has none (an editable install); the message says where it looked.
    """
    return _packaged("lib/pkgconfig", "The pkg-config file")
