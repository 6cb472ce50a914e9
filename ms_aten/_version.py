__version__ = "0.1.0"  # the one version string: setup.py (pyproject.toml) reads it from here
