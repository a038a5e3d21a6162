"""The package version, in one place: pyproject.toml reads it from here (tool.setuptools.dynamic),
and reports, work directories and ``gpudedup --version`` name it."""

__version__ = "0.2.0"
