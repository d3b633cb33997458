"""Storage access: the only modules of the package that talk SQL."""
