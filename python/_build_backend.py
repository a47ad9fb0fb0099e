"""The PEP 517 backend of `pip install ./python`: maturin's, after
`scripts/ensure-deps` installs what the llama.cpp build needs (cmake,
libclang, a C++ compiler) when missing, as the README's commands do.
maturin itself cannot run a script before cargo starts, and a build.rs
here would run only after llama-cpp-sys-2's own build script."""

import os
import subprocess

import maturin
from maturin import *  # noqa: F401,F403  (every hook maturin offers)

_HERE = os.path.dirname(os.path.abspath(__file__))


def _ensure_deps() -> None:
    script = os.path.join(_HERE, "..", "scripts", "ensure-deps")
    if os.path.exists(script):
        subprocess.run([script], check=True)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _ensure_deps()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _ensure_deps()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
