"""Tools for the people working on this repository (not the library): `python -m tools.stage_deps`."""
