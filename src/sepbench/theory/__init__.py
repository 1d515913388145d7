"""The theory of the separations paper: hand-set constructions and lower-bound calculators."""
