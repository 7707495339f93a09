"""Builds the compiled compact-AST walk (featurize/ast_walk.cc) against tvm-ffi's headers;
everything else is in pyproject.toml."""

from pathlib import Path

import tvm_ffi.libinfo
from setuptools import Extension, setup

_FFI_INCLUDE = tvm_ffi.libinfo.find_include_path()
_DLPACK_INCLUDE = tvm_ffi.libinfo.find_dlpack_include_path()
_FFI_LIB = str(Path(tvm_ffi.libinfo.find_libtvm_ffi()).parent)

setup(
    ext_modules=[
        Extension(
            "cdmpp.featurize._ast_walk",
            sources=["featurize/ast_walk.cc"],
            include_dirs=[_FFI_INCLUDE, _DLPACK_INCLUDE],
            library_dirs=[_FFI_LIB],
            libraries=["tvm_ffi"],
            extra_compile_args=["-std=c++17", "-O2"],
            language="c++",
        )
    ]
)
