"""Theory companions to the papers: constructions, bounds and random-network experiments (see the submodules)."""
