"""Build of the compiled hot path (mm2py.protocol._native); everything else is in pyproject.toml.

The extension needs a C compiler, Python's headers and liblz4's (``scripts/install.sh`` installs
them with apt when missing). mm2py runs without it too, on the pure-Python path, only slower.
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
        )
    ]
)
