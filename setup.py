"""The package layout and the build of the compiled hot path (mm2py.protocol._native); everything
else is in pyproject.toml.

The design card's rooms: ``connectors/`` and ``rest_api/`` stand at the top of the checkout beside
``mm2py/`` and install as ``mm2py.connectors`` and ``mm2py.rest_api`` (``package_dir``), so a wheel
adds exactly one top-level package, ``mm2py``.

The extension needs a C compiler, Python's headers and liblz4's (``scripts/install.sh`` installs
them with apt when missing). It is optional: where it cannot be built, ``pip install`` still
succeeds and mm2py runs on the pure-Python path, only slower (it says so once at start-up).
"""

from setuptools import Extension, find_packages, setup

#: package -> its folder in the checkout; every subpackage follows its parent's folder
ROOMS = {"mm2py": "mm2py", "mm2py.connectors": "connectors", "mm2py.rest_api": "rest_api"}


def _packages() -> list[str]:
    return [name for package, folder in ROOMS.items()
            for name in (package, *(f"{package}.{sub}" for sub in find_packages(folder)))]


setup(
    package_dir=ROOMS,
    packages=_packages(),
    ext_modules=[
        Extension(
            "mm2py.protocol._native",
            sources=[f"mm2py/protocol/{name}.c" for name in ("_native", "_native_merge", "_native_plan")],
            depends=["mm2py/protocol/_native.h"],
            libraries=["lz4"],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,  # no compiler or no headers: a warning, and the pure-Python path
        )
    ]
)
