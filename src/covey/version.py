"""The covey version (pyproject.toml's `version`), importable without importing the package's API."""

__version__ = "0.1.0"
