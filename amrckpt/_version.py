"""The version of amrckpt (written into every checkpoint's manifest)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
