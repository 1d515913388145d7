"""The package's version, below every module, for those that cannot import the package's front door."""
__version__ = "0.1.0"
