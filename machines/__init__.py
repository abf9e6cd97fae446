"""Machine descriptions bundled with twill (TOML data files, read by :mod:`twill.machine`)."""
