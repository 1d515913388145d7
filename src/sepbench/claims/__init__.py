"""Every claim of the three papers as a checked verdict: the catalogue, its rules, and ``sepbench reproduce``."""
from sepbench.claims.catalogue import PAPERS, SCALES, Claim, catalogue, select

__all__ = ["PAPERS", "SCALES", "Claim", "catalogue", "select"]
