"""Builds mircuda's optional C hot path (stable ABI). Metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mircuda._hotpath",
            sources=["mircuda/_hotpath.c"],
            py_limited_api=True,
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
            optional=True,  # without a C compiler mircuda falls back to ctypes
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
