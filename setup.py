"""Build of the compiled hot path (mm2py.protocol._native); everything else is in pyproject.toml.

The extension needs a C compiler, Python's headers and liblz4's (``scripts/install.sh`` installs
them with apt when missing). It is optional: where it cannot be built, ``pip install`` still
succeeds and mm2py runs on the pure-Python path, only slower (it says so once at start-up).
"""

from setuptools import Extension, setup

setup(
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
